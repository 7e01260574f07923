"""A large JSON answer is encoded in a worker thread a piece at a time, never on the event loop.

A session's view (``GET /sessions/{id}``) and a page of its events (``GET /sessions/{id}/events``)
hold its texts whole: a session of many large tool outputs has a view of tens of megabytes, whose
encoding in one call held the event loop (every session and stream of the daemon) 90 to 130 ms.
Through a real daemon (loopback port 0, in this thread), a profiler on this thread only
(:mod:`tests.loop_json`)."""

from __future__ import annotations

import msgspec

from runtime.json_answer import PIECE_CHARS

from ..loop_json import json_of_text_on_this_thread


async def test_a_view_and_a_page_of_events_are_encoded_off_the_event_loop(daemon, strong):
    """``GET /sessions/{id}``, ``PATCH /sessions/{id}`` and ``POST /sessions/{id}/fork`` (each
    answers a view) and ``GET /sessions/{id}/events``."""
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    text = "".join(f"line {i}: \"quoted\" \\ and \u2028 é\n" for i in range(12_000))  # several pieces long
    assert len(text) > 4 * PIECE_CHARS
    await daemon.submit(strong, sid, "r1", text)
    await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(text) as on_loop:
        view = await daemon.get(f"/sessions/{sid}", strong)
        page = await daemon.get(f"/sessions/{sid}/events", strong, params={"limit": 1000})
        renamed = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"name": "long"})
        fork = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": view.json()["lastSeq"]})
    assert on_loop == []
    assert (renamed.status_code, fork.status_code) == (200, 201)
    for views in (renamed, fork):
        assert [it["text"] for it in views.json()["items"] if it["role"] == "user"] == [text]
    assert (view.status_code, page.status_code) == (200, 200)
    for answer in (view, page, renamed, fork):
        assert answer.headers["content-type"] == "application/json"
        assert int(answer.headers["content-length"]) == len(answer.content)
        assert msgspec.json.encode(answer.json()) == answer.content  # (msgspec's own encoding, byte for byte)
    assert [it["text"] for it in view.json()["items"] if it["role"] == "user"] == [text]
    inputs = [e for e in page.json()["events"] if e["kind"] == "input.submitted"]
    assert [part["text"] for e in inputs for part in e["body"]["content"]] == [text]
