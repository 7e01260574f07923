"""A large session view is encoded in a worker thread a piece at a time, never in one call on the
event loop; a view of ordinary size in one call, as any answer.

A session's view (``GET /sessions/{id}``, and the views ``PATCH /sessions/{id}`` and
``POST /sessions/{id}/fork`` answer) holds its texts whole: a session of many large tool outputs
has a view of tens of megabytes, whose encoding in one call held the event loop (every session
and stream of the daemon) 90 to 130 ms. Encoding in pieces costs more in all (a walk of the
view in Python) and its worker thread, though it gives the lock up after each chunk, holds it
for a few milliseconds at a time, so a view of ordinary size stays one call (about 2 MB a millisecond); its
size is its texts' JSON, escapes counted near the threshold. A page of events
(``GET /sessions/{id}/events``) likewise, by the bytes its rows declare. Through a real daemon
(loopback port 0, in this thread), a profiler on this thread only (:mod:`tests.loop_json`)."""

from __future__ import annotations

import msgspec

from runtime.pieces import PIECE_CHARS
from runtime.json_chars import ESCAPE_MAX, PIECES_FROM_CHARS, page_chars
from runtime.views import view_texts

from ..loop_json import json_of_text_on_this_thread

LINE = "line {}: \"quoted\" \\ and \u2028 é\n"


def _texts(n: int, chars: int) -> list[str]:
    """``n`` different input texts of about ``chars`` characters (under the default 1 MiB body)."""
    return ["".join(LINE.format(f"{k}.{i}") for i in range(chars // len(LINE.format(f"{k}.0")))) for k in range(n)]


def _check_encoding(*answers) -> None:
    for answer in answers:
        assert answer.headers["content-type"] == "application/json"
        assert int(answer.headers["content-length"]) == len(answer.content)
        assert msgspec.json.encode(answer.json()) == answer.content  # (msgspec's own encoding, byte for byte)


async def test_a_large_view_is_encoded_off_the_event_loop(daemon, strong):
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    texts = _texts(8, 600_000)  # (each several pieces long; all of them past PIECES_FROM_CHARS)
    assert len(texts[0]) > 4 * PIECE_CHARS and sum(map(len, texts)) > PIECES_FROM_CHARS
    for i, text in enumerate(texts):
        await daemon.submit(strong, sid, f"r{i}", text)
        await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        view = await daemon.get(f"/sessions/{sid}", strong)
        renamed = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"name": "long"})
        fork = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": view.json()["lastSeq"]})
    assert on_loop == []
    assert (view.status_code, renamed.status_code, fork.status_code) == (200, 200, 201)
    for answer in (view, renamed, fork):
        assert [it["text"] for it in answer.json()["items"] if it["role"] == "user"] == texts
    _check_encoding(view, renamed, fork)


async def test_a_view_of_ordinary_size_is_encoded_in_one_call(daemon, strong):
    # (the pieces cost more than the one call they replace: only a large view takes them)
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    (text,) = _texts(1, 400_000)
    await daemon.submit(strong, sid, "r1", text)
    await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(text) as on_loop:
        view = await daemon.get(f"/sessions/{sid}", strong)
    assert on_loop != []
    assert [it["text"] for it in view.json()["items"] if it["role"] == "user"] == [text]
    _check_encoding(view)


async def test_a_view_of_escaped_text_past_the_threshold_as_json_is_encoded_off_the_event_loop(daemon, strong):
    # Five inputs of quotes and newlines: 2.25 Mi characters, twice that of JSON. Counted by
    # their characters (the code before) the view was under the threshold and one call on the loop.
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    texts = [f"{k}:" + '"\n' * 225_000 for k in range(5)]
    for i, text in enumerate(texts):
        await daemon.submit(strong, sid, f"r{i}", text)
        await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        view = await daemon.get(f"/sessions/{sid}", strong)
    strings = view_texts(view.json())
    assert sum(map(len, strings)) <= PIECES_FROM_CHARS < sum(len(msgspec.json.encode(t)) - 2 for t in strings)
    assert on_loop == []
    assert [it["text"] for it in view.json()["items"] if it["role"] == "user"] == texts
    _check_encoding(view)


async def test_a_view_whose_escapes_are_counted_under_the_threshold_is_still_one_call(daemon, strong):
    # 1.2 Mi characters with quotes, a backslash and a newline a line: past a sixth of the
    # threshold, so its escapes are counted (each as six), and under it all the same.
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    texts = _texts(2, 600_000)
    for i, text in enumerate(texts):
        await daemon.submit(strong, sid, f"r{i}", text)
        await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        view = await daemon.get(f"/sessions/{sid}", strong)
    assert PIECES_FROM_CHARS // ESCAPE_MAX < sum(map(len, view_texts(view.json())))
    assert on_loop != []
    assert [it["text"] for it in view.json()["items"] if it["role"] == "user"] == texts
    _check_encoding(view)


async def _pages_of_events(daemon, strong, sid: str, limit: int) -> list:
    """The session's events read ``limit`` at a time: each page's answer, in order."""
    pages, after = [], 0
    while (page := await daemon.get(f"/sessions/{sid}/events?after={after}&limit={limit}", strong)).json()["events"]:
        pages.append(page)
        after = page.json()["nextAfter"]
    return pages


async def test_a_page_declaring_less_than_the_threshold_of_escaped_text_is_encoded_off_the_event_loop(daemon, strong):
    # Each declared byte counts as six characters (ESCAPE_MAX: a control character is six of JSON;
    # a quote or a newline two): a page whose rows declare more than a sixth of the threshold, and
    # less than the threshold, is encoded in pieces.
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    texts = _texts(4, 600_000)
    assert PIECES_FROM_CHARS // ESCAPE_MAX < sum(len(t.encode()) for t in texts) < PIECES_FROM_CHARS
    for i, text in enumerate(texts):
        await daemon.submit(strong, sid, f"r{i}", text)
        await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        whole = await daemon.get(f"/sessions/{sid}/events?limit=1000", strong)
    assert whole.status_code == 200 and on_loop == []
    events = whole.json()["events"]
    assert [e["body"]["content"][0]["text"] for e in events if e["kind"] == "input.submitted"] == texts
    _check_encoding(whole)


async def test_a_page_of_ordinary_size_is_encoded_in_one_call(daemon, strong):
    # (the pieces cost more than the one call they replace) An input's event read as a page of its
    # own, declaring fewer bytes than a sixth of the threshold: six characters a byte keep it
    # under, so it is one call on the loop.
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    (text,) = _texts(1, 400_000)
    assert page_chars(len(text.encode()) + 10_000) <= PIECES_FROM_CHARS  # (the body's other fields: far less)
    await daemon.submit(strong, sid, "r1", text)
    await daemon.wait_idle(strong, sid)
    (seq,) = [e["seq"] for e in (await daemon.get(f"/sessions/{sid}/events?limit=1000", strong)).json()["events"]
              if e["kind"] == "input.submitted"]
    with json_of_text_on_this_thread(text) as on_loop:
        page = await daemon.get(f"/sessions/{sid}/events?after={seq - 1}&limit=1", strong)
    assert page.status_code == 200 and len(on_loop) == 1
    assert [e["body"]["content"][0]["text"] for e in page.json()["events"]] == [text]
    _check_encoding(page)


async def test_a_large_page_of_events_is_encoded_off_the_event_loop(daemon, strong):
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    texts = _texts(8, 600_000)  # (their events declare more bytes than PIECES_FROM_CHARS)
    for i, text in enumerate(texts):
        await daemon.submit(strong, sid, f"r{i}", text)
        await daemon.wait_idle(strong, sid)
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        whole = await daemon.get(f"/sessions/{sid}/events?limit=1000", strong)
    assert whole.status_code == 200 and on_loop == [] and len(whole.content) > PIECES_FROM_CHARS
    events = whole.json()["events"]
    assert [e["body"]["content"][0]["text"] for e in events if e["kind"] == "input.submitted"] == texts
    assert whole.json()["nextAfter"] == events[-1]["seq"]
    _check_encoding(whole)
    # The same events a page each: a page of one of these inputs declares about 733,000 bytes,
    # each counted as the six characters of JSON a control character would be, so it is past the
    # threshold too (at two a byte it was one call on the loop); its bytes are still msgspec's.
    assert page_chars(len(texts[-1].encode())) > PIECES_FROM_CHARS >= 2 * len(texts[-1].encode())
    with json_of_text_on_this_thread(texts[-1]) as on_loop:
        pages = await _pages_of_events(daemon, strong, sid, 1)
    assert on_loop == []
    _check_encoding(*pages)
    assert [e for page in pages for e in page.json()["events"]] == events
    assert whole.content == msgspec.json.encode({"events": events, "nextAfter": events[-1]["seq"]})
