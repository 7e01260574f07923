"""An answer cut at the model's output limit while it wrote a tool call, over the wire, for each
protocol, through a real session: the answer's last call is recorded as the model streamed it
and answered ``INVALID_ARGUMENT`` without being run (its arguments may be incomplete: one cut
before any argument arrived reads as ``{}``, on which a tool whose arguments are all optional
ran with its defaults); the calls before it run, and the next request tells the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events import types as t

from .conftest import PROTOCOLS
from .scripts import reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers import openai_responses as orr
from .servers.base import Reply
from .test_actor import one_input
from .test_invalid_arguments import sent_calls, sent_results

SLEEP = '{"milliseconds": 1}'


# What stops an answer where it was, as each protocol says it (Anthropic ``stop_reason``, Chat
# ``finish_reason``, a Responses ``incomplete`` response's ``incomplete_details.reason``).
CUT_STOPS = {
    "output limit": {"anthropic": "max_tokens", "openai-chat": "length", "openai-responses": "max_output_tokens"},
    "content filter": {"anthropic": "refusal", "openai-chat": "content_filter", "openai-responses": "content_filter"},
}
# The stop reason a session records for each: the output limit's as one word, the content
# filter's as the provider said it.
RECORDED_STOPS = {"output limit": dict.fromkeys(PROTOCOLS, "max_tokens"), "content filter": CUT_STOPS["content filter"]}
# What a cut call's error says cut it.
CUT_BY = {"output limit": "cut at the model's output limit", "content filter": "cut by the provider's content filter"}
# The protocols whose content filter cuts an answer where it is and keeps it in the context
# (Anthropic's refusal ends the task: test_refused_turns.py).
FILTERING = [p for p in PROTOCOLS if p != "anthropic"]


def cut_answer(protocol: str, calls: list[tuple[str, str, str]], *, by: str = "output limit") -> Reply:
    """An answer stopped at the output limit (or ``by="content filter"``) while its last call was
    written, as each protocol says it (:data:`CUT_STOPS`): Anthropic ``stop_reason: max_tokens``,
    Chat ``finish_reason: length``, a Responses ``response.incomplete`` (``max_output_tokens``)
    whose last call never got its ``function_call_arguments.done`` nor ``output_item.done`` (its
    item ``incomplete``). The last call's arguments are what had streamed (``""``: none)."""
    stop = CUT_STOPS[by][protocol]
    if protocol == "anthropic":
        scripted = an.message_stream(text="Working.", calls=calls, stop_reason=stop, output_tokens=4096)
        scripted.events = [(name, data) for name, data in scripted.events
                           if not (name == "content_block_delta" and data["delta"].get("partial_json") == "")]
        return scripted
    if protocol == "openai-chat":
        return oc.chat_stream(text="Working.", calls=calls, finish=stop, usage=oc.usage(900, 4096))
    scripted = orr.response_stream(text="Working.", calls=calls, status="incomplete", usage=orr.usage(900, 4096))
    last = f"fc_{calls[-1][0]}"
    scripted.events = [(name, data) for name, data in scripted.events
                       if not (name == "response.function_call_arguments.done" and data["item_id"] == last)
                       and not (name == "response.output_item.done" and data["item"]["id"] == last)]
    name, data = scripted.events[-1]
    output = [{**item, "status": "incomplete"} if item["id"] == last else item for item in data["response"]["output"]]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": output,
                                                       "incomplete_details": {"reason": stop}}})
    return scripted


async def _session(protocol: str, first: Reply, server: Any, make: Any, tmp_path: Any) -> tuple[Any, list]:
    provider = make(protocol)
    server.push(first, reply(protocol, text="Done."))
    state, evs = await one_input(tmp_path / "data", provider, "the time, then a nap")
    assert not [e.event for e in evs if e.kind == "model.failed"]
    assert state.status == "idle" and state.agents["main"].items[-1].text == "Done."  # the session went on
    return state, evs


def _finished(evs: list) -> dict[str, t.ToolFinished]:
    return {e.event.call_id: e.event for e in evs if e.kind == "tool.finished"}


def _result_text(protocol: str, sent: Any) -> str:
    if protocol == "anthropic":
        assert sent["is_error"] is True
        return "".join(b["text"] for b in sent["content"])
    return sent if isinstance(sent, str) else "".join(p["text"] for p in sent)


def _assert_not_run(protocol: str, evs: list, server: Any, call_id: str, name: str, *,
                    cause: str = CUT_BY["output limit"]) -> None:
    """The call was started and finished with the cut's error (naming its ``cause``), as an
    unknown tool's call is, and the model's next request carried that error as the call's
    result."""
    assert [e.event.call_id for e in evs if e.kind == "tool.started"].count(call_id) == 1
    got = _finished(evs)[call_id]
    assert (got.name, got.status, got.is_error, got.error_code) == (name, "error", True, "INVALID_ARGUMENT")
    text = "".join(p.text for p in got.content)
    assert text.startswith(f"INVALID_ARGUMENT: the answer was {cause} while this {name} call was being written")
    assert "may be incomplete" in text and "not run" in text and "call it again" in text
    message = text.removeprefix("INVALID_ARGUMENT: ")
    assert got.structured_content == {"error": {"code": "INVALID_ARGUMENT", "message": message}}
    assert _result_text(protocol, sent_results(protocol, server.bodies[-1])[call_id]) == text


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_cut_before_its_arguments_at_the_output_limit_is_not_run(protocol, server, make, tmp_path):
    # It was recorded with "{}" and run: get_system_time answered with the time.
    _state, evs = await _session(protocol, cut_answer(protocol, [("call_a", "get_system_time", "")]),
                                 server, make, tmp_path)
    (responded, _done) = [e.event for e in evs if e.kind == "model.responded"]
    assert responded.stop_reason == "max_tokens"
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == [("call_a", "get_system_time", "{}")]
    _assert_not_run(protocol, evs, server, "call_a", "get_system_time")
    # The call goes back as it was recorded, followed by its error.
    assert [call_id for call_id, _args in sent_calls(protocol, server.bodies[-1])] == ["call_a"]


@pytest.mark.parametrize(("cause", "protocol"), [*(("output limit", p) for p in PROTOCOLS),
                                               *(("content filter", p) for p in FILTERING)])
async def test_of_two_calls_cut_the_first_runs_and_the_last_does_not(cause, protocol, server, make, tmp_path):
    # The last call's arguments read as whole JSON, but the model was still writing them when the
    # output limit (or the content filter) stopped it: it ran.
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP)]
    _state, evs = await _session(protocol, cut_answer(protocol, calls, by=cause), server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == RECORDED_STOPS[cause][protocol]
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == calls  # kept as streamed
    first = _finished(evs)["call_a"]
    assert (first.status, first.is_error, first.error_code) == ("ok", False, None)
    _assert_not_run(protocol, evs, server, "call_b", "sleep_milliseconds", cause=CUT_BY[cause])
    assert cause not in json.dumps(sent_results(protocol, server.bodies[-1])["call_a"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_without_arguments_in_an_answer_that_ended_normally_runs(protocol, server, make, tmp_path):
    # (The guard: only an answer cut at the output limit keeps its last call from running.)
    ended = reply(protocol, text="Working.", calls=[("call_a", "get_system_time", "")])
    _state, evs = await _session(protocol, ended, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "tool_use"
    got = _finished(evs)["call_a"]
    assert (got.status, got.is_error, got.error_code) == ("ok", False, None)
