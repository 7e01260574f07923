"""The SSE frame of a large event and a large request body are made in a worker thread, not on
the event loop; the frames keep their order on every stream, and a body at exactly the limit is
taken while one byte more is refused.

Through a real daemon (loopback port 0, in this thread) and a real HTTP client; a profiler on
this thread only (:mod:`tests.loop_json`) sees which JSON encodings of a text ran on the loop.
"""

from __future__ import annotations

import json

from runtime.bus import FRAME_OFF_LOOP_CHARS
from runtime.http_parts import _HIGH_SURROGATE_ESCAPE, BODY_ON_LOOP_BYTES

from ..loop_json import json_of_text_on_this_thread
from ..loop_profile import on_this_thread
from .conftest import raw_http

MAX_BODY = 16 * 1024 * 1024


def _large(i: int) -> str:
    """A text past the frame threshold: quotes, a backslash, U+2028 (escaped in a data: line)."""
    line = f"large {i}: \"quoted\" \\ and \u2028 é\n"
    return line * (FRAME_OFF_LOOP_CHARS // len(line) + 2)


def _assert_in_order(messages, seqs: list[int], texts: dict[int, str]) -> None:
    """``messages`` (a stream's events) carry exactly the events ``seqs``, in order, the inputs'
    texts whole, and each delta inside its open model request (after its ``model.requested``)."""
    got = [m.id for m in messages if m.id is not None]
    assert got == seqs
    open_request = False
    for m in messages:
        if m.event == "model.requested":
            open_request = True
        elif m.event in ("model.responded", "model.failed"):
            open_request = False
        elif m.event == "model.delta":
            assert open_request, "a delta came before the model request it belongs to"
        if m.event == "input.submitted":
            assert m.json()["body"]["content"][0]["text"] == texts[m.id]
    assert sorted(texts) == [m.id for m in messages if m.event == "input.submitted"]


async def test_frames_keep_their_order_across_small_and_large_events(daemon_factory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": MAX_BODY}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    inputs = ["small 0", _large(1), "small 2", "small 3", _large(4), "small 5"]
    start = (await d.get("/health")).json()["lastSeq"]
    async with d.sse(token, params={"session": sid}) as live:
        with json_of_text_on_this_thread(inputs[1]) as on_loop:
            for i, text in enumerate(inputs):  # (no wait between them: the large frames are made
                await d.submit(token, sid, f"r{i}", text)  # while small events queue behind them)
            await d.wait_idle(token, sid, timeout=60)
            events = await d.events(token, sid)
            last = events[-1]["seq"]
            await live.until(lambda m: m.id == last, timeout=60)
        # The large input's frame was not encoded on the loop (the view and the events page that
        # carry it are, in one call each: their JSON is under the pieces' threshold).
        assert set(on_loop) <= {"json_response"}
    seqs = [e["seq"] for e in events if e["seq"] > start]
    texts = {e["seq"]: e["body"]["content"][0]["text"] for e in events if e["kind"] == "input.submitted"}
    assert sorted(texts.values(), key=inputs.index) == inputs
    live_events = [m for m in live.messages if m.comment is None]
    _assert_in_order(live_events, seqs, texts)
    assert any(m.event == "model.delta" for m in live_events)

    # The replay from Last-Event-ID makes the same frames, the large ones in a worker thread too.
    with json_of_text_on_this_thread(inputs[4]) as on_loop:
        async with d.sse(token, params={"session": sid}, last_event_id=start) as replay:
            await replay.until(lambda m: m.id == last, timeout=60)
    assert on_loop == []
    replayed = [m for m in replay.messages if m.comment is None]
    _assert_in_order(replayed, seqs, texts)
    by_seq = {m.id: m.data for m in live_events if m.id is not None}
    assert all(by_seq[m.id] == m.data for m in replayed)  # byte for byte the live frames' data


def _searches_for_a_high_surrogate(frame, event, arg):
    return "search" if event == "c_call" and getattr(arg, "__self__", None) is _HIGH_SURROGATE_ESCAPE else None


def _input_body(text: str, size: int, **extra) -> bytes:
    """An input's JSON body of exactly ``size`` bytes (its text padded)."""
    head = json.dumps({"requestId": "r-" + str(size), "content": "", **extra}).encode()
    raw = head.replace(b'"content": ""', b'"content": "' + text.encode() + b"x" * (size - len(head) - len(text)) + b'"')
    assert len(raw) == size
    return raw


async def test_a_large_body_at_exactly_the_limit_is_taken_and_one_byte_more_refused(daemon_factory):
    limit = 2 * BODY_ON_LOOP_BYTES + 7  # (past the threshold: decoded in a worker thread)
    d = await daemon_factory(config={"server": {"maxBodyBytes": limit}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    path = f"/api/v1/sessions/{sid}/inputs"

    r = await raw_http(d.port, "POST", path, headers, _input_body("at the limit ", limit))
    assert r.status == 202, r.body
    r = await raw_http(d.port, "POST", path, headers, _input_body("one more ", limit + 1))
    assert r.status == 413 and r.code == "BODY_TOO_LARGE", r.body
    assert str(limit) in r.json()["error"]["message"]

    # Refusals made in the worker thread are the ones made on the loop, code and wording.
    big = limit - 1000
    r = await raw_http(d.port, "POST", path, headers, _input_body("dup ", big)[:-1] + b', "requestId": "b"}')
    assert r.status == 400 and r.code == "INVALID_JSON", r.body
    assert "holds the key 'requestId' twice" in r.json()["error"]["message"]
    r = await raw_http(d.port, "POST", path, headers, _input_body("cut ", big)[:-2])
    assert r.status == 400 and r.code == "INVALID_JSON", r.body
    assert "is not valid JSON" in r.json()["error"]["message"]
    # A cut body's lone high surrogate escape is looked for in the worker too, never on the loop.
    with on_this_thread(_searches_for_a_high_surrogate) as on_loop:
        r = await raw_http(d.port, "POST", path, headers, _input_body("lone ", big)[:-2] + b"\\ud83d")
    assert r.status == 400 and r.code == "INVALID_JSON", r.body
    assert "escape not followed by its low surrogate" in r.json()["error"]["message"], r.body
    assert on_loop == []
    r = await raw_http(d.port, "POST", path, headers, _input_body("typed ", big).replace(b'"requestId": "r-', b'"requestId": 7, "x": "', 1))
    assert r.status == 422 and r.code == "VALIDATION_FAILED", r.body
    assert "$.requestId" in r.json()["error"]["message"], r.body

    await d.wait_idle(token, sid, timeout=60)
    texts = [e["body"]["content"][0]["text"] for e in await d.events(token, sid) if e["kind"] == "input.submitted"]
    assert len(texts) == 1 and texts[0].startswith("at the limit ")
