"""An answer the provider's content filter cut while it wrote a tool call, over the wire, through a
real session: Chat ``finish_reason: content_filter`` and a Responses ``incomplete`` response whose
``incomplete_details.reason`` is ``content_filter``. The answer's last call is answered as cut,
naming the content filter, and not run, as at the output limit; the calls before it run. The stop
reason is recorded as the provider said it. (Anthropic's ``stop_reason: refusal``, its streaming
classifiers' stop, runs none of the answer's calls and ends the task: ``test_refused_turns.py``.)"""

from __future__ import annotations

import pytest

from .scripts import reply
from .servers.base import Reply
from .test_failures import _as_refusal
from .test_output_limit_calls import CUT_BY, FILTERING, SLEEP, _assert_not_run, _finished, _session, cut_answer

BY_THE_FILTER = CUT_BY["content filter"]


def _filtered(protocol: str, calls: list[tuple[str, str, str]]) -> Reply:
    return cut_answer(protocol, calls, by="content filter")


@pytest.mark.parametrize("protocol", FILTERING)
async def test_a_call_cut_by_the_content_filter_before_its_arguments_is_not_run(protocol, server, make, tmp_path):
    # It was recorded with "{}" and run: get_system_time answered with the time.
    _state, evs = await _session(protocol, _filtered(protocol, [("call_a", "get_system_time", "")]),
                                 server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert [(c.call_id, c.arguments) for c in responded.tool_calls] == [("call_a", "{}")]
    _assert_not_run(protocol, evs, server, "call_a", "get_system_time", cause=BY_THE_FILTER)


async def test_a_responses_call_a_content_filtered_final_output_leaves_out_is_kept_as_cut(server, make, tmp_path):
    # The final output listed only the finished call: the one being written was lost (only a
    # cut at the output limit kept it).
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP[:9])]
    scripted = _filtered("openai-responses", calls)
    name, data = scripted.events[-1]
    output = [item for item in data["response"]["output"] if item.get("call_id") != "call_b"]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": output}})
    _state, evs = await _session("openai-responses", scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert responded.stop_reason == "content_filter"
    assert [(c.call_id, c.name, c.arguments) for c in responded.tool_calls] == calls  # as streamed
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run("openai-responses", evs, server, "call_b", "sleep_milliseconds", cause=BY_THE_FILTER)


async def test_a_responses_content_filtered_response_without_output_does_not_run_its_unfinished_call(
        server, make, tmp_path):
    # The final response's output came empty (a proxy's): the stream's items are the answer, the
    # unfinished call among them, and that call ran.
    calls = [("call_a", "get_system_time", "{}"), ("call_b", "sleep_milliseconds", SLEEP)]
    scripted = _filtered("openai-responses", calls)
    name, data = scripted.events[-1]
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "output": []}})
    _state, evs = await _session("openai-responses", scripted, server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert (responded.stop_reason, [c.call_id for c in responded.tool_calls]) == ("content_filter", ["call_a", "call_b"])
    assert _finished(evs)["call_a"].status == "ok"
    _assert_not_run("openai-responses", evs, server, "call_b", "sleep_milliseconds", cause=BY_THE_FILTER)


def _refusing_with_a_call(protocol: str) -> Reply:
    """An answer that ended normally with the model's own refusal text (Chat ``delta.refusal``, a
    Responses ``refusal`` part) and a call."""
    words, calls = "I won't do that part.", [("call_a", "get_system_time", "")]
    scripted = reply(protocol, text=words, calls=calls)
    if protocol == "openai-responses":
        scripted.events = [(name.replace("output_text", "refusal") if name else name, _as_refusal(data))
                           for name, data in scripted.events]
        return scripted
    scripted.events = [(name, {**data, "choices": [{**data["choices"][0], "delta": {"refusal": words}}]})
                       if isinstance(data, dict) and data["choices"] and data["choices"][0]["delta"].get("content")
                       else (name, data) for name, data in scripted.events]
    return scripted


@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses"])
async def test_a_refusal_beside_a_call_in_an_answer_that_ended_normally_runs_the_call(protocol, server, make, tmp_path):
    # (The guard: the model's own refusal text with a call is an answer, not a cut: the stop is
    # tool_use and the call runs.)
    _state, evs = await _session(protocol, _refusing_with_a_call(protocol), server, make, tmp_path)
    responded = [e.event for e in evs if e.kind == "model.responded"][0]
    assert (responded.text, responded.stop_reason) == ("I won't do that part.", "tool_use")
    got = _finished(evs)["call_a"]
    assert (got.status, got.is_error, got.error_code) == ("ok", False, None)
