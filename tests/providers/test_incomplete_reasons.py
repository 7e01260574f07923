"""The other ``incomplete_details.reason`` values of a Responses ``incomplete`` response the SDK
lists besides ``max_output_tokens`` and ``content_filter``, over the wire, through a real
session. ``max_messages`` (undocumented where it stops the answer) is taken as a cut: the
answer's last call is answered as cut and not run, the calls before it run. ``steered`` (a stop
"at a safe output boundary", the SDK says) leaves the answer's calls whole: they run. Each stop
reason is recorded as the server sent it."""

from __future__ import annotations

import pytest

from .test_output_limit_calls import SLEEP, _assert_not_run, _finished, _session
from .servers import openai_responses as orr
from .servers.base import Reply

PROTOCOL = "openai-responses"
CALLS = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP)]


def _incomplete(reason: str, *, last_unfinished: bool) -> Reply:
    """A ``response.incomplete`` with ``reason`` whose last call (``last_unfinished``) never got
    its ``function_call_arguments.done`` nor ``output_item.done`` (its item ``incomplete``), or
    whose calls all ended."""
    scripted = orr.response_stream(text="Working.", calls=CALLS, status="incomplete", usage=orr.usage(900, 40))
    last = f"fc_{CALLS[-1][0]}"
    if last_unfinished:
        scripted.events = [(name, data) for name, data in scripted.events
                           if not (name == "response.function_call_arguments.done" and data["item_id"] == last)
                           and not (name == "response.output_item.done" and data["item"]["id"] == last)]
    name, data = scripted.events[-1]
    output = [{**item, "status": "incomplete"} if last_unfinished and item["id"] == last else item
              for item in data["response"]["output"]]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": output,
                                                       "incomplete_details": {"reason": reason}}})
    return scripted


async def test_a_call_at_the_message_limit_is_answered_as_cut_and_not_run(server, make, tmp_path):
    _state, evs = await _session(PROTOCOL, _incomplete("max_messages", last_unfinished=True), server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "max_messages"  # as the server said it
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == CALLS
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run(PROTOCOL, evs, server, "call_b", "sleep_milliseconds",
                    cause="cut at the provider's limit on messages (max_messages)")


async def test_a_call_the_final_output_leaves_out_at_the_message_limit_is_kept_as_cut(server, make, tmp_path):
    # (As at the output limit: the call the stream was writing is the answer's last, not lost.)
    await _assert_left_out_call_kept_as_cut(_incomplete("max_messages", last_unfinished=True), server, make, tmp_path,
                                            cause="cut at the provider's limit on messages (max_messages)")


async def _assert_left_out_call_kept_as_cut(scripted: Reply, server, make, tmp_path, *, cause: str) -> None:
    """``scripted`` with ``call_b`` taken out of its final ``response.output``, through a session:
    the answer still has both calls, and ``call_b`` is answered as cut (``cause``) and not run."""
    name, data = scripted.events[-1]
    output = [item for item in data["response"]["output"] if item.get("call_id") != "call_b"]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": output}})
    _state, evs = await _session(PROTOCOL, scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert [c.call_id for c in responded.tool_calls] == ["call_a", "call_b"]
    _assert_not_run(PROTOCOL, evs, server, "call_b", "sleep_milliseconds", cause=cause)


async def test_the_calls_of_a_steered_response_are_whole_and_run(server, make, tmp_path):
    _state, evs = await _session(PROTOCOL, _incomplete("steered", last_unfinished=False), server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "steered"
    finished = _finished(evs)
    for call_id in ("call_a", "call_b"):
        got = finished[call_id]
        assert (got.status, got.is_error, got.error_code) == ("ok", False, None), got


def _without_reason(scripted: Reply, details: object) -> Reply:
    name, data = scripted.events[-1]
    response = {k: v for k, v in data["response"].items() if k != "incomplete_details"}
    if details is not ...:
        response["incomplete_details"] = details
    scripted.events[-1] = (name, {**data, "response": response})
    return scripted


@pytest.mark.parametrize("details", [None, {}, {"reason": None}, ...], ids=["null", "empty", "null-reason", "left-out"])
async def test_an_incomplete_response_that_gives_no_reason_is_a_cut(details, server, make, tmp_path):
    """A response ``incomplete`` without saying why (``incomplete_details`` null, empty or left
    out, as a proxy may send it) says nothing of where it stopped, as ``max_messages`` does not:
    its last call is answered as cut and not run, the calls before it run, and the stop is
    recorded as ``incomplete``. It ran every call, the one being written when it stopped too."""
    scripted = _without_reason(_incomplete("max_messages", last_unfinished=True), details)
    _state, evs = await _session(PROTOCOL, scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "incomplete"
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == CALLS
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run(PROTOCOL, evs, server, "call_b", "sleep_milliseconds",
                    cause="cut before the provider finished it (an incomplete response that gave no reason)")


async def test_a_call_the_final_output_of_an_incomplete_response_without_reason_leaves_out_is_kept_as_cut(
        server, make, tmp_path):
    await _assert_left_out_call_kept_as_cut(
        _without_reason(_incomplete("max_messages", last_unfinished=True), None), server, make, tmp_path,
        cause="cut before the provider finished it (an incomplete response that gave no reason)")
