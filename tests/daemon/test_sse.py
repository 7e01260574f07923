"""F-API-5: the SSE stream: frames, filters, exact resume, heartbeats, slow clients, shutdown.

Ordering is never assumed from time: a test waits for the frames it expects (bounded), and
compares what a stream delivered with what the log holds (the events API, itself checked
against ``lens log decode`` in test_routes). Heartbeats use a short configured interval and
real (bounded) waits; the clock-dependent assertions are upper bounds, but for one lower bound
the kernel measures (a client reset no sooner than the write-stall limit after its last byte).
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import zstandard

from events import types as t
from events.store import Draft, EventStore
from runtime import stream_api

from ..rawlog import edit_log
from .conftest import (
    API, BUSY, LIMIT, Daemon, DaemonFactory, SseStream, error_of, parse_block, raw_http, slow_stream_request,
)


async def log_seqs(d: Daemon, token: str, *, session: str | None = None, project: str | None = None) -> list[int]:
    """The seqs a stream with this filter must deliver, read from the log (not from the bus)."""
    last = (await d.get("/health")).json()["lastSeq"]
    if session is not None:
        return [e["seq"] for e in await d.events(token, session)]
    if project is None:
        return list(range(1, last + 1))
    out = set()
    sessions = (await d.get("/sessions", token, params={"project": project})).json()["sessions"]
    for s in sessions:
        out.update(e["seq"] for e in await d.events(token, s["id"]))
    out.update(_project_seqs[project])
    return sorted(out)


STRETCH_EVENTS = 10_000  # events of no project, ...
STRETCH_NOTE_CHARS = 20_000  # ... each with this much text to read

_project_seqs: dict[str, list[int]] = {}  # project id -> the seq of its project.created (ids are unique)


async def make_project(d: Daemon, token: str, name: str) -> dict:
    p = await d.project(token, name)
    _project_seqs[p["id"]] = [p["seq"]]
    return p


async def read_until_seq(stream: SseStream, seq: int, timeout: float = LIMIT) -> None:
    await stream.until(lambda m: m.id is not None and m.id >= seq, timeout=timeout)


# --------------------------------------------------------------------------- frames and filters


async def test_frames_are_id_event_data_of_the_decoded_event(daemon: Daemon, strong: str, reader: str):
    p = await make_project(daemon, strong, "p")
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    logged = await daemon.events(reader, sid)
    async with daemon.sse(reader, params={"session": sid}, last_event_id=0) as stream:
        await read_until_seq(stream, logged[-1]["seq"])
        frames = [m for m in stream.messages if m.id is not None]
        assert [(m.id, m.event) for m in frames] == [(e["seq"], e["kind"]) for e in logged]
        assert [m.json() for m in frames] == logged
        # live: the next input's events arrive on the same stream
        ack = await daemon.submit(strong, sid, "r2", "again")
        live = await stream.until(lambda m: m.id == ack["seq"])
        assert live.event == "input.submitted" and live.json()["request_id"] == "r2"
        await daemon.wait_idle(strong, sid)
        final = (await daemon.events(reader, sid))[-1]["seq"]
        await read_until_seq(stream, final)
    assert stream.seqs == [e["seq"] for e in await daemon.events(reader, sid)]


async def test_raw_frame_layout(daemon: Daemon, strong: str):
    """Byte level: ``id:``, ``event:``, ``data:`` lines, one JSON line of data, blank-line separated."""
    p = await daemon.project(strong)
    headers = {"Authorization": f"Bearer {strong}", "Last-Event-ID": "0"}
    with trio.fail_after(LIMIT):
        s = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with s:
            req = f"GET {API}/events/stream HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            await s.send_all(req.encode())
            data = b""
            while b"event: project.created" not in data or not data.rstrip(b"\r\n").endswith(b"}"):
                data += await s.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-type: text/event-stream" in head.lower()
    assert b"cache-control: no-cache" in head.lower()
    # undo the chunked framing
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        text, body = text + rest[:size], rest[size + 2:]
    block = [b for b in text.split(b"\n\n") if b.startswith(b"id:")][0]
    lines = block.split(b"\n")
    assert lines[0] == f"id: {p['seq']}".encode()
    assert lines[1] == b"event: project.created"
    assert lines[2].startswith(b"data: {") and len(lines) == 3
    assert json.loads(lines[2][len(b"data: "):])["project_id"] == p["id"]
    assert parse_block(block).id == p["seq"]


async def test_head_of_the_stream_is_its_headers_and_the_connection_serves_the_next_request(
        daemon: Daemon, reader: str):
    """HEAD answers the headers a GET would have and no body, without subscribing. It used to run
    the stream's body (quart iterates it even for HEAD; the server only drops the bytes), which
    never ends: the response was never finished, the kept-alive connection never answered its
    next request, and the stream held a bus subscription for ever."""
    h = f"Host: 127.0.0.1:{daemon.port}\r\nAuthorization: Bearer {reader}\r\n"
    req = (f"HEAD {API}/events/stream?after=0 HTTP/1.1\r\n{h}\r\n"
           f"HEAD {API}/events/stream?session= HTTP/1.1\r\n{h}\r\n"  # still checked as GET is: 400
           f"GET {API}/health HTTP/1.1\r\n{h}\r\n").encode()
    data = b""
    with trio.fail_after(LIMIT):
        s = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        async with s:
            await s.send_all(req)
            while b"lastSeq" not in data:
                chunk = await s.receive_some(65536)
                assert chunk, data
                data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"content-type: text/event-stream" in head.lower() and b"cache-control: no-cache" in head.lower()
    assert rest.startswith(b"HTTP/1.1 400"), rest  # no body: the next bytes are the next response
    bad, _, rest = rest.partition(b"\r\n\r\n")
    assert b"application/json" in bad.lower()
    assert rest.startswith(b"HTTP/1.1 200"), rest
    assert b"lastSeq" in rest


async def test_filters_by_session_and_by_project(daemon: Daemon, strong: str, reader: str):
    a = await make_project(daemon, strong, "a")
    b = await make_project(daemon, strong, "b")
    a1 = (await daemon.session(strong, a["id"]))["id"]
    a2 = (await daemon.session(strong, a["id"]))["id"]
    b1 = (await daemon.session(strong, b["id"]))["id"]
    async with (daemon.sse(reader, params={"session": a1}) as s_a1,
                daemon.sse(reader, params={"project": a["id"]}) as s_a,
                daemon.sse(reader, params={"project": b["id"], "session": b1}) as s_b1,
                # (the camelCase of the JSON bodies filters the same: it was ignored, unfiltered)
                daemon.sse(reader, params={"sessionId": a1}) as s_a1_camel,
                daemon.sse(reader, params={"projectId": a["id"]}) as s_a_camel,
                daemon.sse(reader) as s_all):
        for s in (s_a1, s_a, s_b1, s_a1_camel, s_a_camel, s_all):
            await s.next()  # the greeting: subscribed
        start = (await daemon.get("/health")).json()["lastSeq"]
        c = await make_project(daemon, strong, "c")
        for i, sid in enumerate((a1, a2, b1, a1)):
            await daemon.submit(strong, sid, f"r{i}", "hi")
        for sid in (a1, a2, b1):
            await daemon.wait_idle(strong, sid)
        last = (await daemon.get("/health")).json()["lastSeq"]
        await read_until_seq(s_all, last)
        want_a1 = [s for s in await log_seqs(daemon, reader, session=a1) if s > c["seq"] - 1]
        want_a = [s for s in await log_seqs(daemon, reader, project=a["id"]) if s > c["seq"]]
        want_b1 = [s for s in await log_seqs(daemon, reader, session=b1) if s > c["seq"]]
        for stream, want in ((s_a1, want_a1), (s_a, want_a), (s_b1, want_b1), (s_a1_camel, want_a1), (s_a_camel, want_a)):
            await read_until_seq(stream, want[-1])
        assert s_a1.seqs == want_a1 == s_a1_camel.seqs
        assert s_a.seqs == want_a == s_a_camel.seqs
        assert s_b1.seqs == want_b1
        first_all = s_all.seqs[0]
        assert first_all == c["seq"] == start + 1 and s_all.seqs == list(range(first_all, last + 1))
        assert all(m.json()["session_id"] == a1 for m in s_a1.messages if m.id is not None)
        assert all(m.json()["project_id"] == a["id"] for m in s_a.messages if m.id is not None)
        assert {m.json()["session_id"] for m in s_a.messages if m.id is not None} == {a1, a2}


async def test_a_filter_and_its_camel_case_given_together_are_refused(daemon: Daemon, strong: str, reader: str):
    # Naming the same id under both names opened the stream (only different ids were refused):
    # the filter given twice, which `?session=X&session=X` is refused for.
    p = await make_project(daemon, strong, "p")
    sid = (await daemon.session(strong, p["id"]))["id"]
    by_name = await daemon.get("/tools/inventory", reader, params={"session": sid})
    by_alias = await daemon.get("/tools/inventory", reader, params={"sessionId": sid})
    assert by_name.status_code == by_alias.status_code == 200 and by_name.json() == by_alias.json()
    assert by_name.json() != (await daemon.get("/tools/inventory", reader)).json()  # (the session's view)
    cases = [("/events/stream", "session", "sessionId", sid), ("/events/stream", "project", "projectId", p["id"]),
             ("/tools/inventory", "session", "sessionId", sid), ("/sessions", "project", "projectId", p["id"])]
    for route, name, alias, same in cases:
        for params in ({name: same, alias: same}, {name: "x_a", alias: "x_b"}, {alias: same, name: same}):
            r = await daemon.get(route, reader, params=params)
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (route, params, r.text)
            assert r.json()["error"]["message"] == \
                f"{name} and {alias} are the same filter, given twice; give one of them", r.text


@pytest.mark.parametrize("by", ["session", "project", "all"])
async def test_last_event_id_resume_is_exact_while_appends_continue(daemon: Daemon, strong: str, reader: str, by: str):
    p = await make_project(daemon, strong, "p")
    q = await make_project(daemon, strong, "q")  # noise outside the filters
    sid = (await daemon.session(strong, p["id"]))["id"]
    noise = (await daemon.session(strong, q["id"]))["id"]
    params = {"session": {"session": sid}, "project": {"project": p["id"]}, "all": {}}[by]
    produced = trio.Event()
    acks: list[int] = []

    async def producer() -> None:
        for i in range(10):
            acks.append((await daemon.submit(strong, sid, f"r{i}", f"message {i}"))["seq"])
            await daemon.submit(strong, noise, f"n{i}", f"noise {i}")
        await daemon.wait_idle(strong, sid)
        await daemon.wait_idle(strong, noise)
        produced.set()

    seen: list[int] = []
    connections = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        last = 0
        final: int | None = None
        while final is None or last < final:
            if produced.is_set() and final is None:
                want = await (log_seqs(daemon, reader, session=sid) if by == "session" else
                              log_seqs(daemon, reader, project=p["id"]) if by == "project" else log_seqs(daemon, reader))
                final = want[-1]
            async with daemon.sse(reader, params=params, last_event_id=last) as stream:
                connections += 1
                got = 0
                while final is None or last < final:
                    with trio.move_on_after(0.3 if final is None else LIMIT) as scope:
                        msg = await stream.next_event()
                    if scope.cancelled_caught:
                        break  # quiet for now: check whether the producer finished
                    assert msg is not None, "the stream ended on its own"
                    if msg.id is None:
                        continue  # ephemeral (streaming deltas): not in the log
                    assert msg.id > last, f"duplicate or out of order: {msg.id} after {last}"
                    seen.append(msg.id)
                    last = msg.id
                    got += 1
                    if got >= 3 and final is None:
                        break  # disconnect mid-flow and resume
    assert connections >= 4
    assert seen == want, (sorted(set(want) - set(seen)), sorted(set(seen) - set(want)))
    assert set(acks) <= set(seen)


async def test_after_query_parameter_and_bad_last_event_id(daemon: Daemon, strong: str):
    p1 = await daemon.project(strong, "one")
    p2 = await daemon.project(strong, "two")
    async with daemon.sse(strong, params={"after": str(p1["seq"])}) as stream:
        msg = await stream.next_event()
        assert msg is not None and msg.id == p2["seq"]
    for bad in ("abc", "-1", "-9223372036854775809", "9223372036854775808", str(10**30), "1_0", "+5"):
        r = await daemon.get("/events/stream", strong, headers={"Last-Event-ID": bad})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", bad
    # a number of any length is out of range, not "not an integer" (21 digits and more were)
    for big in ("9223372036854775808", "1" + "0" * 20, "-" + "9" * 40, "9" * 5000):
        for how in ({"headers": {"Last-Event-ID": big}}, {"params": {"after": big}}):
            r = await daemon.get("/events/stream", strong, **how)
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", big
            assert "must be from 0 to 9223372036854775807" in r.json()["error"]["message"], (big[:30], r.text)
    # leading zeros and -0 are the number they spell (left as is: no client is misled by them)
    async with daemon.sse(strong, params={"after": "-0"}) as stream:
        assert (await stream.next_event()).id == p1["seq"]
    async with daemon.sse(strong, last_event_id="0" * 30 + str(p1["seq"])) as stream:  # type: ignore[arg-type]
        assert (await stream.next_event()).id == p2["seq"]
    r = await daemon.get("/events/stream", strong, params={"after": "\u0663"})  # an Arabic-Indic 3
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    # an id past the log is no position a client can have seen: refused, naming the last seq
    # (resuming "after" it would silently skip the events up to it once they exist)
    r = await daemon.get("/events/stream", strong, headers={"Last-Event-ID": str(p2["seq"] + 1)})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    assert f"past the last event of this log ({p2['seq']})" in r.json()["error"]["message"]
    # exactly at the last seq: live from there, no gap
    async with daemon.sse(strong, last_event_id=p2["seq"]) as stream:
        await stream.next()
        p3 = await daemon.project(strong, "three")
        msg = await stream.next_event()
        assert msg is not None and msg.id == p3["seq"] == p2["seq"] + 1
    for name in ("session", "project"):
        r = await daemon.get("/events/stream", strong, params={name: ""})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", name
    # ?after= empty, malformed or twice is refused even beside a Last-Event-ID; two headers too;
    # an error names the parameter that was wrong
    for query, headers in [("after=", {}), ("after=abc", {"Last-Event-ID": "1"}),
                           ("after=1&after=2", {"Last-Event-ID": "1"})]:
        r = await daemon.get(f"/events/stream?{query}", strong, headers=headers)
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", query
    r = await daemon.get("/events/stream?after=-1", strong)
    assert "after must be" in r.json()["error"]["message"], r.text
    raw = await raw_http(daemon.port, "GET", f"{API}/events/stream",
                         {"Authorization": f"Bearer {strong}", "Last-Event-ID": "1\r\nLast-Event-ID: 2"})
    assert raw.status == 400 and raw.code == "INVALID_ARGUMENT" and b"given 2 times" in raw.body
    # the header wins over ?after= (an EventSource reconnects to the same URL with it)
    async with daemon.sse(strong, params={"after": "0"}, last_event_id=p1["seq"]) as stream:
        msg = await stream.next_event()
        assert msg is not None and msg.id == p2["seq"]


def damage_event(d: Daemon, seq: int) -> None:
    """Replace the stored body of event ``seq`` with a zstd frame that does not decode (as a
    damaged disk would), behind the daemon's back."""
    edit_log(d.data_dir, "UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (seq,))


@pytest.mark.parametrize("by", ["all", "project"])
async def test_a_damaged_event_in_the_replay_ends_the_stream_with_a_final_event(
        daemon: Daemon, strong: str, reader: str, by: str):
    """The events before a damaged one are delivered, then ``stream.end`` names it. A damaged
    event used to fail the whole read of its page: the stream was cut (no final event), and the
    healthy events before it in that page were never delivered."""
    one = await daemon.project(strong, "one")
    two = await daemon.project(strong, "two")
    three = await daemon.project(strong, "three")
    damage_event(daemon, two["seq"])
    params = {"project": two["id"]} if by == "project" else None
    async with daemon.sse(reader, params=params, last_event_id=0) as stream:
        events = await stream.to_end()
    want = [] if by == "project" else [one["seq"]]
    assert [m.id for m in events[:-1]] == want and all(m.event == "project.created" for m in events[:-1])
    end = events[-1]
    assert end.event == "stream.end" and end.id is None, end
    body = end.json()
    assert body["code"] == "EVENT_CORRUPT" and body["seq"] == two["seq"], body
    assert body["lastEventId"] == one["seq"] and str(two["seq"]) in body["reason"], body
    # the daemon serves on; a stream resumed past the damaged event streams the rest
    assert (await daemon.get("/health")).status_code == 200
    async with daemon.sse(reader, last_event_id=two["seq"]) as stream:
        assert (await stream.next_event()).id == three["seq"]


async def test_a_project_stream_reads_only_its_project_in_stretches(daemon: Daemon, strong: str, reader: str,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """A project's replay reads only that project's rows (the filter is in the SQL; the others
    are never decoded), the log in stretches of ``PROJECT_SCAN_SEQS`` seqs: every event of the
    project arrives once, in order, across stretches with none of its events, and a damaged event
    of another project does not end the stream (it used to: every event was decoded, then
    filtered)."""
    monkeypatch.setattr(stream_api, "PROJECT_SCAN_SEQS", 3)
    mine = await make_project(daemon, strong, "mine")
    other = await make_project(daemon, strong, "other")
    sid = (await daemon.session(strong, mine["id"]))["id"]
    noise = (await daemon.session(strong, other["id"]))["id"]
    for i in range(3):
        for n in range(3):  # stretches of other events longer than a scan's
            await daemon.submit(strong, noise, f"n{i}-{n}", f"noise {i} {n}")
            await daemon.wait_idle(strong, noise)
        await daemon.submit(strong, sid, f"r{i}", f"message {i}")
        await daemon.wait_idle(strong, sid)
    theirs = await log_seqs(daemon, reader, project=other["id"])
    damage_event(daemon, theirs[len(theirs) // 2])
    want = await log_seqs(daemon, reader, project=mine["id"])
    async with daemon.sse(reader, params={"project": mine["id"]}, last_event_id=0) as stream:
        await read_until_seq(stream, want[-1])
        assert [m.id for m in stream.messages if m.id is not None] == want
        assert not any(m.event == "stream.end" for m in stream.messages)
    # the damaged event still ends a stream that must read it
    async with daemon.sse(reader, params={"project": other["id"]}, last_event_id=0) as stream:
        events = await stream.to_end()
    assert events[-1].event == "stream.end" and events[-1].json()["seq"] == theirs[len(theirs) // 2]


def relabel_event(d: Daemon, seq: int, kind: str) -> None:
    """Store event ``seq`` as an event of ``kind`` (its body tagged with it, as a newer Lens
    writes one), behind the daemon's back."""
    raw = msgspec.msgpack.encode({"kind": kind, "note": "from elsewhere"})
    body = zstandard.ZstdCompressor(write_checksum=True).compress(raw)
    edit_log(d.data_dir, "UPDATE events SET kind = ?, body = ?, raw_size = ?, dict_id = 0 WHERE seq = ?",
             (kind, body, len(raw), seq))


async def test_a_row_whose_kind_holds_a_line_break_writes_no_frame_of_its_own(daemon: Daemon, strong: str,
                                                                              reader: str):
    """A kind goes out as the ``event:`` line. A row of unknown kind decoded as an event of the
    future whatever its kind held, and one with line breaks in it wrote lines of its own into
    every stream replaying it: here a forged ``input.submitted`` with ``id: 999999``, which a
    client then resumed from and was refused for ever (past the last event). Such a row is
    damaged: the stream ends at it, naming it, as for any event the log cannot read."""
    one = await daemon.project(strong, "one")
    two = await daemon.project(strong, "two")
    three = await daemon.project(strong, "three")
    relabel_event(daemon, one["seq"], "future.kind")  # a kind of the future, well formed: streamed
    forged = 'future.kind\nid: 999999\nevent: input.submitted\ndata: {"forged": true}\n\nevent: x'
    relabel_event(daemon, two["seq"], forged)
    async with daemon.sse(reader, last_event_id=0) as stream:
        await stream.until(lambda m: m.event == "stream.end" or m.id == three["seq"])
        events = [m for m in stream.messages if m.comment is None]
    assert [(m.id, m.event) for m in events[:-1]] == [(one["seq"], "future.kind")], events
    assert events[0].json()["body"] == {"note": "from elsewhere"}
    end = events[-1]
    assert end.event == "stream.end" and end.id is None, end
    body = end.json()
    assert body["code"] == "EVENT_CORRUPT" and body["seq"] == two["seq"], body
    assert body["lastEventId"] == one["seq"], body
    # resumed past it, the stream goes on
    async with daemon.sse(reader, last_event_id=two["seq"]) as stream:
        assert (await stream.next_event()).id == three["seq"]


# --------------------------------------------------------------------------- heartbeats


async def test_heartbeats_keep_an_idle_stream_alive(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.5}})
    token = await d.pair("c")
    async with d.sse(token) as stream:
        greeting = await stream.next()
        assert greeting is not None and greeting.comment is not None
        start = trio.current_time()
        pings = 0
        while pings < 2:
            msg = await stream.next(timeout=3.0)
            assert msg is not None and msg.comment is not None, msg
            pings += msg.comment == "ping"
        assert trio.current_time() - start < 4.0
        assert stream.seqs == []


async def test_a_replay_reading_a_long_stretch_its_filter_does_not_match_keeps_talking(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A project's stream resumed from 0 reads the whole log to find that project's events; the
    replay wrote nothing until it found one, and a client that takes a few heartbeats of silence
    for a dead connection (the dashboard takes three) gave up on it, resumed from the same place,
    and never got past the stretch. Now the replay sends a heartbeat when it has been quiet that
    long, as the live part does. The other projects' events are skipped in SQL, in stretches of
    ``PROJECT_SCAN_SEQS`` seqs; here one seq a stretch, so that the 10,000 reads take many
    heartbeats on any machine (at least one must come before the first event)."""
    monkeypatch.setattr(stream_api, "PROJECT_SCAN_SEQS", 1)
    store = EventStore.open(tmp_path / "data")  # the stretch: other events, written before the daemon starts
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            note = "".join(f"{i:08x}" for i in range(STRETCH_NOTE_CHARS // 8))
            for _ in range(STRETCH_EVENTS // 500):
                await store.append(*[Draft(t.ConfigChanged(name=note, digest="0" * 64)) for _ in range(500)])
            store.close_writer()
    finally:
        store.close()
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.1}})
    token = await d.pair("c", strong=True)
    project = await d.project(token, "late")
    async with d.sse(token, params={"project": project["id"]}, last_event_id=0) as stream:
        first = await stream.next_event(timeout=60)
        assert first is not None and first.id == project["seq"], first
        comments = [m.comment for m in stream.messages if m.comment is not None]
    assert comments[0] == "lens stream" and "ping" in comments[1:], comments


async def test_a_delta_never_arrives_before_its_model_requested(daemon: Daemon, strong: str, reader: str):
    """Deltas are published as the model streams; committed events reach the bus through the
    store's acknowledgement and the bus's task. A delta published right after its
    `model.requested` committed overtook it (8 answers in 20 in an audit)."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    async with daemon.sse(reader, params={"session": sid}) as stream:
        await stream.next()
        for i in range(20):
            await daemon.submit(strong, sid, f"r{i}", f"hello {i}")
            await stream.until(lambda m: m.event == "model.responded")
        await daemon.wait_idle(strong, sid)
    order = [m.event for m in stream.messages if m.event in ("model.requested", "model.delta", "model.responded")]
    assert order.count("model.delta") >= 20
    answering = False
    for i, event in enumerate(order):
        if event == "model.requested":
            answering = True
        elif event == "model.responded":
            answering = False
        else:
            assert answering, f"a delta outside a model call at {i}: {order[max(0, i - 3):i + 2]}"


# --------------------------------------------------------------------------- slow clients


BUFFER = 8
BIG = 64 * 1024


def chunked_events(data: bytes) -> list:
    """The SSE events (comments left out) of a whole raw HTTP/1.1 response with a chunked body."""
    body = data.partition(b"\r\n\r\n")[2]
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text, body = text + rest[:size], rest[size + 2:]
    msgs = [parse_block(b) for b in text.split(b"\n\n") if b.strip()]
    return [m for m in msgs if m.comment is None]


async def open_slow_stream(d: Daemon, token: str, query: str, last_event_id: int | None = None) -> tuple:
    """A stream on a socket with a small receive buffer that reads nothing after the head."""
    slow = await slow_stream_request(d.port, token, query, last_event_id=last_event_id)
    head = await slow.recv(200)
    assert head.startswith(b"HTTP/1.1 200"), head
    return slow, head


async def read_response(sock, data: bytes) -> bytes:
    with trio.fail_after(LIMIT):
        while not data.endswith(b"0\r\n\r\n"):
            chunk = await sock.recv(1 << 20)
            assert chunk, "connection closed without the end of the response"
            data += chunk
    return data


async def test_a_slow_subscriber_is_dropped_without_slowing_anyone(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"sseBufferEvents": BUFFER}})
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)  # the run holds: every input below only queues
    await d.wait_running_call(token, sid)
    start_seq = (await d.get("/health")).json()["lastSeq"]

    # the slow client: subscribes, then reads nothing (a small receive buffer fills quickly)
    slow, head = await open_slow_stream(d, token, f"session={sid}")
    with slow:

        target = start_seq + 40  # each input below is exactly one event (input.submitted; the run holds)
        acks: list[int] = []
        async with d.sse(token, params={"session": sid}) as fast:
            await fast.next()

            async def follow() -> None:
                while not fast.seqs or fast.seqs[-1] < target:
                    assert await fast.next(timeout=LIMIT * 2) is not None

            with trio.fail_after(LIMIT * 2):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(follow)
                    for i in range(40):  # the writer keeps acknowledging while the slow client reads nothing
                        acks.append((await d.submit(token, sid, f"big{i}", f"{i:04d}" + "x" * BIG))["seq"])
            fast_seqs = fast.seqs
        assert acks == list(range(start_seq + 1, target + 1))
        assert fast_seqs == acks  # the other subscriber got everything, in order

        # now read what the slow client was sent: a prefix of the events, then a final stream.dropped
        data = await read_response(slow, head)
    events = chunked_events(data)
    assert events[-1].event == "stream.dropped", [m.event for m in events][-5:]
    got = [m.id for m in events if m.id is not None]
    assert got == list(range(start_seq + 1, start_seq + 1 + len(got)))  # a gap-free prefix
    assert len(got) < 40, "the slow client was never dropped"
    print(f"slow client got {len(got)} of 40 events before it was dropped")
    dropped = events[-1].json()
    assert dropped["lastEventId"] == (got[-1] if got else start_seq)
    # and it can resume from there, exactly
    async with d.sse(token, params={"session": sid}, last_event_id=dropped["lastEventId"]) as again:
        await read_until_seq(again, acks[-1])
        assert got + again.seqs == fast_seqs
    await d.post(f"/sessions/{sid}/abort", token)


REPLAYED = 16  # inputs of HUGE characters: ~11 MB of replay, well past what socket buffers hold
HUGE = 700 * 1024


@pytest.mark.parametrize("ending", ["credential revoked", "shutdown"])
async def test_a_slow_reader_of_a_long_replay_still_sees_revocation_and_shutdown(
    daemon_factory: DaemonFactory, ending: str
):
    """The replay from the log is written in pieces, and the stream checks its credential and
    the daemon's state between two pieces: a reader that takes minutes over a long replay does
    not keep reading a revoked credential's events (or hold up shutdown) until it is through."""
    d = await daemon_factory()
    writer = await d.pair("w", strong=True)
    token = await d.pair("r")
    p = await d.project(writer)
    sid = (await d.session(writer, p["id"]))["id"]
    await d.submit(writer, sid, "busy", BUSY)  # the run holds: each input below is one event
    await d.wait_running_call(writer, sid)
    acks = [(await d.submit(writer, sid, f"huge{i}", f"{i:04d}" + "x" * HUGE))["seq"] for i in range(REPLAYED)]
    logged = await log_seqs(d, writer, session=sid)
    slow, data = await open_slow_stream(d, token, f"session={sid}", last_event_id=0)
    with slow:
        with trio.fail_after(LIMIT):  # read a little: the replay is under way, then stop reading
            while len(data) < 2 * HUGE:
                chunk = await slow.recv(1 << 16)
                assert chunk
                data += chunk
        if ending == "shutdown":
            await d.post(f"/sessions/{sid}/abort", writer)
            d.stop.set()
        else:
            await trio.to_thread.run_sync(lambda: d.pairs().revoke("r"))
            await d.wait_refused(token)
        data = await read_response(slow, data)
    events = chunked_events(data)
    assert events[-1].event == "stream.end", [m.event for m in events][-3:]
    end = events[-1].json()
    assert end["reason"] == ending
    got = [m.id for m in events if m.id is not None]
    assert got == logged[: len(got)]  # a prefix of the log, in order
    assert end["lastEventId"] == got[-1]
    huge = [m.id for m in events if m.id in acks]
    assert 1 <= len(huge) < REPLAYED, "the whole replay was written after the stream should have ended"
    print(f"{len(huge)} of {REPLAYED} huge events were written before the stream ended ({ending})")
    if ending == "shutdown":
        with trio.fail_after(LIMIT):
            await d.done.wait()


async def test_one_burst_larger_than_the_buffer_does_not_drop_readers_that_keep_up(daemon_factory: DaemonFactory):
    """A subscriber was counted behind by everything flushed in the current tick, before anyone
    had a chance to write it: a fast model's burst of deltas (or a few inputs in a row with a
    small buffer) dropped every reader of the session at once. Lateness is what is left of
    earlier ticks."""
    burst = [f"piece {i} " for i in range(300)]
    d = await daemon_factory(config={"server": {"sseBufferEvents": BUFFER}, "providers": [
        {"id": "faux", "protocol": "faux", "script": [{"when": "burst", "chunks": burst}]}]})
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    async with d.sse(token, params={"session": sid}) as one, d.sse(token) as two:
        await one.next()
        await two.next()
        await d.submit(token, sid, "r1", "burst please")
        for stream in (one, two):
            done = await stream.until(lambda m: m.event in ("model.responded", "stream.dropped"))
            assert done.event == "model.responded", "a reader that keeps up was dropped"
            text = "".join(json.loads(m.data)["text"] for m in stream.messages if m.event == "model.delta")
            assert text == "".join(burst)  # every delta, in order
        for i in range(3):  # inputs in a row: more frames than the buffer within a tick or two
            await d.submit(token, sid, f"q{i}", f"again {i}")
        await d.wait_idle(token, sid)
        last = (await d.events(token, sid))[-1]["seq"]
        for stream in (one, two):
            await read_until_seq(stream, last)
            assert not any(m.event == "stream.dropped" for m in stream.messages)


STALL = 1.0  # the daemon's write_stall_seconds where a test means the stall
TCP_CLOSE = 7  # tcpi_state of a socket its peer reset


def tcp_state_and_quiet_ms(sock: trio.socket.SocketType) -> tuple[int, int]:
    """From the kernel's TCP_INFO of ``sock``: its state, and the milliseconds since it last
    received data (tcpi_last_data_recv), whether or not the application read it."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 56)
    return info[0], struct.unpack_from("I", info, 52)[0]


async def watch_for_reset(sock: trio.socket.SocketType, quiet_at_reset: list[int], reset: trio.Event) -> None:
    """Look at ``sock`` (reading nothing) until its peer resets it; note how long it had then
    received nothing, as the kernel saw it at the first look that found it reset."""
    while (state := tcp_state_and_quiet_ms(sock))[0] != TCP_CLOSE:
        await trio.sleep(0.02)
    quiet_at_reset.append(state[1])
    reset.set()


@pytest.mark.parametrize("ending", ["stall", "shutdown"])
async def test_a_client_that_stops_reading_is_reset(daemon_factory: DaemonFactory, ending: str):
    """A live write the client takes no byte of: the stream's task waited for ever (its
    connection and a copy of the chunk held until the client went away), and held shutdown up
    to the server's grace period. Now the connection is reset after WRITE_STALL_SECONDS without
    progress, or at once when the daemon stops.

    The stall is waited for as it happens, not with a fixed sleep after the last input: a read
    made before the server's stall ran out lets the server go on (no reset comes), and when its
    last write goes out depends on how soon the bus's worker thread makes the large frames, which
    a loaded machine delays. Nothing is read until the kernel reports the reset; the kernel also
    says how long the client had received nothing by then."""
    d = await daemon_factory(write_stall_seconds=STALL if ending == "stall" else 3600.0)
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)
    await d.wait_running_call(token, sid)
    slow, data = await open_slow_stream(d, token, f"session={sid}")
    with slow:
        async with trio.open_nursery() as nursery:
            reset = trio.Event()
            quiet_at_reset: list[int] = []
            if ending == "stall":
                nursery.start_soon(watch_for_reset, slow, quiet_at_reset, reset)
            for i in range(REPLAYED // 2):  # ~5.6 MB live: more than the socket buffers hold
                await d.submit(token, sid, f"huge{i}", f"{i:04d}" + "x" * HUGE)
            start = trio.current_time()
            if ending == "stall":
                # Reading nothing: the server resets the connection. (Bounded generously: the
                # stall begins only once the worker thread's frames fill the socket's buffers.)
                with trio.move_on_after(2 * LIMIT):
                    await reset.wait()
                assert reset.is_set(), f"no reset; (TCP state, ms since the last byte): {tcp_state_and_quiet_ms(slow)}"
                # ... no sooner than the stall limit after the client stopped receiving (the
                # server's last write came no earlier; the kernel counts in jiffies: some slack)
                assert quiet_at_reset[0] >= STALL * 1000 - 50, f"reset {quiet_at_reset[0]} ms after the last byte"
            else:
                d.stop.set()
        ended = None
        with trio.fail_after(LIMIT):
            while ended is None:
                try:
                    chunk = await slow.recv(1 << 20)
                except ConnectionResetError:
                    ended = "reset"
                    break
                if not chunk:
                    ended = "eof"
                data += chunk
        assert not data.endswith(b"0\r\n\r\n"), "the response ended as if the client had kept up"
    if ending == "shutdown":
        with trio.fail_after(LIMIT):
            await d.done.wait()
        assert trio.current_time() - start < 3.0, "a client that reads nothing held up shutdown"
    else:
        assert (await d.get("/health")).status_code == 200  # the daemon is fine


# --------------------------------------------------------------------------- shutdown


async def test_shutdown_ends_open_streams_cleanly(daemon_factory: DaemonFactory):
    d = await daemon_factory()
    token = await d.pair("c")
    p = await d.project(await d.pair("w", strong=True))
    async with d.sse(token, last_event_id=0) as one, d.sse(token, params={"project": p["id"]}) as two:
        await one.until(lambda m: m.id == p["seq"])
        await two.next()
        start = trio.current_time()
        d.stop.set()
        for stream in (one, two):
            end = await stream.until(lambda m: m.event == "stream.end", timeout=5.0)
            assert end.json()["reason"] == "shutdown"
            assert await stream.to_end(timeout=5.0) == []
    with trio.fail_after(5.0):
        await d.done.wait()
    assert trio.current_time() - start < 4.0  # the streams did not hold shutdown to the grace period
    assert "lens: stopped" in d.lines


@pytest.mark.parametrize("by", ["session", "project", "both", "all"])
async def test_streaming_deltas_reach_every_stream_that_covers_the_session(
    daemon: Daemon, strong: str, reader: str, by: str
):
    # Text deltas are ephemeral frames published with their session; a stream filtered by the
    # session's project must get them as well as one filtered by the session.
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    params = {"session": {"session": sid}, "project": {"project": p["id"]},
              "both": {"session": sid, "project": p["id"]}, "all": {}}[by]
    async with daemon.sse(reader, params=params) as stream:
        await stream.next()
        await daemon.submit(strong, sid, "r1", "hello there")
        delta = await stream.until(lambda m: m.event == "model.delta")
        assert json.loads(delta.data)["session_id"] == sid and delta.id is None


async def test_a_stream_joining_mid_answer_gets_what_streamed_so_far(daemon_factory: DaemonFactory) -> None:
    # Deltas are not in the log: a stream that joined mid-answer (a page opened then, a resume
    # after a drop or a restart) saw only the deltas after it joined, the answer's start never.
    d = await daemon_factory(config={"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "think then stream", "reasoning": "Thinking it over. ", "chunks": ["First half. ", "second half."],
         "chunkDelayMs": 60000}]}]})
    token = await d.pair("c", strong=True)
    p = await d.project(token)
    sid = (await d.session(token, p["id"]))["id"]
    other = (await d.session(token, p["id"]))["id"]
    async with d.sse(token, params={"session": sid}) as live:
        await live.next()
        await d.submit(token, sid, "r1", "think then stream")
        await live.until(lambda m: m.event == "model.delta" and m.json()["text"] == "First half. ")
    requested = next(e["seq"] for e in await d.events(token, sid) if e["kind"] == "model.requested")

    def partials(messages: list[Any]) -> list[tuple[str, str]]:
        return [(m.json()["kind"], m.json()["text"]) for m in messages if m.event == "model.partial"]

    so_far = [("reasoning", "Thinking it over. "), ("text", "First half. ")]
    for params, last_event_id in (({"session": sid}, None), ({"project": p["id"]}, None), ({}, None),
                                  ({"session": sid}, requested - 1), ({"session": sid}, requested)):
        async with d.sse(token, params=params, last_event_id=last_event_id) as stream:
            assert (await stream.next()).comment is not None  # the opening comment
            got = [await stream.next_event() for _ in range(3 if last_event_id == requested - 1 else 2)]
        if last_event_id == requested - 1:  # the replay first: the request, then what it streamed
            assert got[0].event == "model.requested" and got[0].id == requested
            got = got[1:]
        assert partials(got) == so_far, (params, last_event_id, got)
        assert all(m.json()["session_id"] == sid and m.json()["agent_id"] == "main" and m.id is None for m in got)
    async with d.sse(token, params={"session": other}) as stream:  # another session: nothing of it
        await stream.next()
        await d.submit(token, other, "o1", "hello")
        await stream.until(lambda m: m.event == "model.responded")
    assert "model.partial" not in [m.event for m in stream.messages]

    # Once the request is over (here aborted), a joining stream gets no partial of it.
    assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200
    await d.wait_idle(token, sid)
    async with d.sse(token, params={"session": sid}, last_event_id=requested) as stream:
        await stream.next()
        await stream.until(lambda m: m.event == "task.finished")
        await d.submit(token, sid, "r2", "a plain one")
        await stream.until(lambda m: m.event == "model.responded")
    assert "model.partial" not in [m.event for m in stream.messages]
