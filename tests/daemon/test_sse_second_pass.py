"""F-API-5 once more, as the author of a dashboard client who has only the spec and the docs:
the real daemon (loopback port 0, the real executor, the ``faux`` provider) read by raw clients.

``test_sse.py``, ``test_sse_acceptance.py``, ``test_sse_properties.py``, ``test_sse_fanout.py``,
``test_sse_write_stall.py``, ``test_large_frames_and_bodies.py`` and the auth tests pin the
frames, the filters and their limits, every resume position, heartbeats, revocation, slow HTTP/1.x
clients and restarts already. This module covers what they leave:

- the stream over HTTP/2 (prior knowledge): the same bytes as over HTTP/1.1, resumed with a
  ``last-event-id`` field (which wins over ``?after=``), multi-MiB data lines and a command's
  output holding CRLF and a lone CR, replayed and live, on three streams of one connection;
- two hundred subscribers at once, each given the same live event, then all gone: the daemon's
  trio tasks and stream bodies are back to what they were;
- a client that reads nothing while eight times its buffer of events (``sseBufferEvents`` 64) is
  written: no write waits on it, the client is dropped with ``stream.dropped`` naming the last seq
  it got, and a resume from there gets every later event once, in order.
- a fork's events on the streams of its session and its project, never on its parent's;
- a strong credential's trust lowered by hand in the pair file while its stream is open;
- one frame larger than the 32 MiB a client may fall behind, read as it comes over HTTP/2;
- a deleted session's stream: its events up to ``session.deleted``, then heartbeats.

Nothing sleeps for ordering: every wait is on an observable condition with a deadline.
"""

from __future__ import annotations

import collections
import json
import socket
import struct

import h2.config
import h2.connection
import h2.events
import trio

from .conftest import API, BUSY, LIMIT, Daemon, DaemonFactory, parse_block, run_tool
from .test_auth import edit_pair_file, record
from .test_sse import chunked_events, open_slow_stream, read_response
from .test_sse_acceptance import raw_stream, stream_ends_as_revoked
from .test_sse_write_stall import open_streams


def task_names() -> list[str]:
    """The names of this trio run's tasks (walked from the root task through each child nursery),
    but for the executor pool's, which come and go with the workspace's executor child."""
    todo, out = [trio.lowlevel.current_root_task()], []
    while todo:
        task = todo.pop()
        if not task.name.startswith("runtime.executors."):
            out.append(task.name)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return out


def frames(body: bytes | bytearray) -> list[bytes]:
    """The event blocks of a stream's payload (comment blocks left out; a cut last block too)."""
    return [bytes(b) for b in body.split(b"\n\n")[:-1] if b and not b.startswith(b":")]


class H2Client:
    """A prior-knowledge HTTP/2 connection that reads every stream and opens its windows as it reads."""

    def __init__(self, stream: trio.SocketStream, port: int) -> None:
        self.stream, self.port = stream, port
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.data: dict[int, bytearray] = {}
        self.status: dict[int, str] = {}
        self.resets: set[int] = set()
        self.changed = trio.Event()

    def get(self, stream_id: int, path: str, token: str, **fields: str) -> None:
        self.data[stream_id] = bytearray()
        self.conn.send_headers(stream_id, [(":method", "GET"), (":path", f"{API}{path}"), (":scheme", "http"),
                                           (":authority", f"127.0.0.1:{self.port}"),
                                           ("authorization", f"Bearer {token}"), *fields.items()], end_stream=True)

    async def run(self) -> None:
        await self.stream.send_all(self.conn.data_to_send())
        while data := await self.stream.receive_some(1 << 20):
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    self.status[ev.stream_id] = dict(ev.headers)[b":status"].decode()
                elif isinstance(ev, h2.events.DataReceived):
                    self.data[ev.stream_id] += ev.data
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    self.resets.add(ev.stream_id)
            await self.stream.send_all(self.conn.data_to_send())
            self.changed.set()
            self.changed = trio.Event()

    async def until(self, done, timeout: float = LIMIT) -> None:  # type: ignore[no-untyped-def]
        with trio.fail_after(timeout):
            while not done():
                await self.changed.wait()


BIG_TEXT = "line one\r\nline two\rline three\n" * (3 * 1024 * 1024 // 30)  # ~3 MiB, CRLF and a lone CR


async def test_over_http2_the_stream_is_the_same_bytes_resumes_and_goes_live(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": 8 * 1024 * 1024}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    out = await run_tool(d, token, sid, "t1", "run_command", {"command": "printf 'a\\r\\nb\\rc\\n'"})
    assert out["content"][0]["text"].startswith("a\r\nb\rc\n"), out
    big = (await d.submit(token, sid, "big", BIG_TEXT))["seq"]
    await d.wait_idle(token, sid, timeout=60)
    logged = await d.events(token, sid)
    last = logged[-1]
    mid = big - 1  # resume just before the multi-MiB event
    end = f"id: {last['seq']}\nevent: {last['kind']}\n".encode()
    _, h1 = await raw_stream(d, token, f"?session={sid}", until=end, headers={"Last-Event-ID": "0"}, whole=True)
    h1_frames = frames(h1)
    assert [parse_block(f).id for f in h1_frames] == [e["seq"] for e in logged]
    assert all(b"\r" not in f for f in h1_frames)
    data_of = {parse_block(f).id: json.loads(parse_block(f).data) for f in h1_frames}
    assert data_of[big]["body"]["content"][0]["text"] == BIG_TEXT
    assert len(next(f for f in h1_frames if parse_block(f).id == big)) > 3 * 1024 * 1024

    async with await trio.open_tcp_stream("127.0.0.1", d.port) as tcp, trio.open_nursery() as nursery:
        client = H2Client(tcp, d.port)
        client.get(1, f"/events/stream?session={sid}", token, **{"last-event-id": "0"})
        client.get(3, f"/events/stream?session={sid}&after=0", token, **{"last-event-id": str(mid)})
        client.get(5, f"/events/stream?session={sid}", token)  # live only
        nursery.start_soon(client.run)
        await client.until(lambda: all(end in client.data[s] and b"\n\n" in client.data[s].rpartition(end)[2]
                                       for s in (1, 3)), timeout=60)
        await client.until(lambda: b": lens stream\n\n" in client.data[5])
        assert client.status == {1: "200", 3: "200", 5: "200"}
        assert frames(client.data[1]) == h1_frames  # byte for byte what HTTP/1.1 carries
        assert frames(client.data[3]) == [f for f in h1_frames if parse_block(f).id > mid]
        assert frames(client.data[5]) == []
        more = (await d.submit(token, sid, "after", "live\r" + BIG_TEXT))["seq"]  # live, multi-MiB too

        def has_more(s: int) -> bool:  # (its frame whole)
            head = f"id: {more}\n".encode()
            return head in client.data[s] and b"\n\n" in client.data[s].rpartition(head)[2]
        await client.until(lambda: all(has_more(s) for s in (1, 3, 5)), timeout=60)
        for s in (1, 3, 5):
            blocks = [parse_block(f) for f in frames(client.data[s])]
            ids = [m.id for m in blocks if m.id is not None]  # (model.delta frames carry no id)
            assert ids == sorted(set(ids)) and ids[-1] >= more, (s, ids[-5:])
            text = next(m for m in blocks if m.id == more).json()["body"]["content"][0]["text"]
            assert text == "live\r" + BIG_TEXT, s
        assert not client.resets
        nursery.cancel_scope.cancel()


SUBSCRIBERS = 200
SLACK = 12  # tasks above the baseline the test's own HTTP client may hold (its kept-alive connections)


async def test_two_hundred_subscribers_get_the_same_event_and_leave_nothing_behind(daemon: Daemon, strong: str):
    p = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, p["id"]))["id"]
    query = f"?project={p['id']}"  # every other subscriber's filter; the rest take every event

    async def settled() -> None:
        """Until no stream body is open (a closed stream's ends once the server sees its socket closed)."""
        with trio.fail_after(LIMIT):
            while open_streams():
                await trio.sleep(0.05)

    await raw_stream(daemon, strong, query, until=b": lens stream\n\n")  # warm up: what a first stream opens
    await daemon.submit(strong, sid, "r0", "hello")  # (and what a session's first run starts)
    await daemon.wait_idle(strong, sid)
    await settled()
    base_names = task_names()

    sockets: list[trio.SocketStream] = []

    def request(i: int) -> bytes:
        return (f"GET {API}/events/stream{query if i % 2 else ''} HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
                f"Authorization: Bearer {strong}\r\n\r\n").encode()
    for i in range(SUBSCRIBERS):  # (each connect and each read below bounded on its own)
        with trio.fail_after(LIMIT):
            s = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            await s.send_all(request(i))
        sockets.append(s)
    bodies: dict[int, bytes] = {}

    async def read(i: int, s: trio.SocketStream, upto: bytes) -> None:
        with trio.fail_after(LIMIT):
            while upto not in bodies.get(i, b""):
                chunk = await s.receive_some(1 << 16)
                assert chunk, bodies.get(i)
                bodies[i] = bodies.get(i, b"") + chunk

    async with trio.open_nursery() as nursery:
        for i, s in enumerate(sockets):
            nursery.start_soon(read, i, s, b": lens stream\n\n")
    assert open_streams() == SUBSCRIBERS
    # (each subscriber holds tasks of its own while it is open: the daemon's count of them grew by
    # at least one a subscriber, which the return to the baseline below must give back)
    assert len(task_names()) - len(base_names) >= SUBSCRIBERS, len(task_names()) - len(base_names)
    seq = (await daemon.project(strong, "q"))["seq"]  # of another project: the filtered do not get it
    seq2 = (await daemon.submit(strong, sid, "r1", "hello"))["seq"]  # of theirs: every subscriber's
    async with trio.open_nursery() as nursery:
        for i, s in enumerate(sockets):
            nursery.start_soon(read, i, s, f"id: {seq2}\n".encode())
    for i, body in bodies.items():
        assert body.startswith(b"HTTP/1.1 200"), body[:100]
        payload = body.partition(b"\r\n\r\n")[2]
        assert payload.count(f"id: {seq}\n".encode()) == (0 if i % 2 else 1), i
        assert payload.count(f"id: {seq2}\n".encode()) == 1, i
    # all leave at once: half close their connections, half reset them
    for i, s in enumerate(sockets):
        if i % 2 == 0:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await s.aclose()
    await settled()

    # Back to the baseline, but for up to two connections this test's HTTP client keeps alive
    # (its pool opens one beside another when calls overlap); a subscriber's leak is 200 of a kind.
    def left() -> collections.Counter:
        return collections.Counter(task_names()) - collections.Counter(base_names)

    def back() -> bool:
        return all(n <= 2 for n in left().values()) and sum(left().values()) <= SLACK
    with trio.move_on_after(LIMIT):
        while not back():
            await trio.sleep(0.05)
    assert back(), f"tasks left by the subscribers: {left()}"
    # and the daemon goes on streaming to a new subscriber
    await daemon.wait_idle(strong, sid)
    async with daemon.sse(strong, last_event_id=seq) as again:
        assert (await again.next_event()).id == seq2


BUFFER_EVENTS = 64  # the daemon's server.sseBufferEvents here
EVENTS = 512  # eight times the buffer
WRITERS = 8  # clients submitting at once
PAD = 1024  # characters of each input's text, so that the frames fill the socket's buffers too


async def test_a_client_reading_nothing_through_many_times_its_buffer_is_dropped_and_resumes_exactly(
        daemon_factory: DaemonFactory):
    # No write waits on a client that takes no byte: every one is acknowledged within the bound
    # while it reads nothing, the client is dropped with stream.dropped naming the last seq it
    # got, and a resume from there gets every later event once, in order. The 30 s after which
    # such a client is reset without a final event (docs/http-api.md) is lifted to 600 s, past
    # the bound, so a write waiting on the client fails this test instead of being freed by it.
    daemon = await daemon_factory(config={"server": {"sseBufferEvents": BUFFER_EVENTS}}, write_stall_seconds=600)
    strong = await daemon.pair("c", strong=True)
    p = await daemon.project(strong)
    sids = [(await daemon.session(strong, p["id"]))["id"] for _ in range(WRITERS)]
    for sid in sids:  # each run holds: every input below is exactly one event
        await daemon.submit(strong, sid, "busy", BUSY)
        await daemon.wait_running_call(strong, sid)

    async def write(n: int, tag: str) -> list[int]:
        acks: list[int] = []

        async def writer(w: int) -> None:
            for i in range(n // WRITERS):
                text = f"{tag} {w} {i} " + "x" * PAD
                acks.append((await daemon.submit(strong, sids[w], f"{tag}{w}-{i}", text))["seq"])
        async with trio.open_nursery() as nursery:
            for w in range(WRITERS):
                nursery.start_soon(writer, w)
        return sorted(acks)

    start = (await daemon.get("/health")).json()["lastSeq"]
    slow, head = await open_slow_stream(daemon, strong, f"project={p['id']}")
    with slow:
        with trio.fail_after(LIMIT * 3):
            acks = await write(EVENTS, "e")
        assert acks == list(range(start + 1, start + EVENTS + 1))
        # (every write was acknowledged while the client read nothing: none waited on it. How
        # fast the writes go beside such a client no benchmark measures; this bound is no timing)
        data = await read_response(slow, head)
    events = chunked_events(data)
    assert events[-1].event == "stream.dropped", [m.event for m in events][-3:]
    assert events[-1].json()["reason"] == "the client did not keep up; resume with Last-Event-ID"
    got = [m.id for m in events[:-1]]
    assert got == list(range(start + 1, start + 1 + len(got))) and len(got) < EVENTS
    last = events[-1].json()["lastEventId"]
    assert last == (got[-1] if got else start)
    async with daemon.sse(strong, params={"project": p["id"]}, last_event_id=last) as again:
        await again.until(lambda m: m.id == acks[-1])
        assert got + again.seqs == acks
    for sid in sids:
        await daemon.post(f"/sessions/{sid}/abort", strong)


async def test_a_fork_streams_under_its_own_session_and_its_project(daemon: Daemon, strong: str):
    """A fork is a session of its own: its events (from its ``session.created`` on) are on a stream
    of its id and of its project, never on one of the session it was forked from."""
    p = await daemon.project(strong, "p")
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "before the fork")
    await daemon.wait_idle(strong, sid)
    parent = [e["seq"] for e in await daemon.events(strong, sid)]
    async with daemon.sse(strong, params={"session": sid}, last_event_id=0) as of_parent, \
            daemon.sse(strong, params={"project": p["id"]}, last_event_id=0) as of_project:
        r = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": parent[-1]})
        assert r.status_code == 201, r.text
        fid = r.json()["id"]
        await daemon.submit(strong, fid, "r2", "in the fork")
        await daemon.wait_idle(strong, fid)
        fork = [e["seq"] for e in await daemon.events(strong, fid)]
        assert fork[0] > parent[-1]
        await daemon.submit(strong, sid, "r3", "after the fork")  # (the parent's stream reads on past the fork)
        await daemon.wait_idle(strong, sid)
        parent = [e["seq"] for e in await daemon.events(strong, sid)]
        await of_parent.until(lambda m: m.id == parent[-1])
        await of_project.until(lambda m: m.id == max(parent[-1], fork[-1]))
        assert of_parent.seqs == parent
        assert of_project.seqs == sorted([p["seq"], *parent, *fork])
    async with daemon.sse(strong, params={"session": fid}, last_event_id=0) as of_fork:
        await of_fork.until(lambda m: m.id == fork[-1])
        assert of_fork.seqs == fork
        assert of_fork.messages[1].event == "session.created"


async def test_trust_lowered_by_hand_in_the_pair_file_ends_the_open_stream_at_once(daemon: Daemon, strong: str):
    """A strong credential's record edited to read-only trust matches no credential any more (a
    credential is bound to the trust it was issued with): its open stream ends with the code a
    request with it now gets, and it cannot resume."""
    token = await daemon.pair("lowered", strong=True)

    async def lower() -> None:
        edit_pair_file(daemon, lambda data: record(data, "lowered").update(trust="read"))
    await stream_ends_as_revoked(daemon, strong, token, lower)


async def test_one_frame_larger_than_the_byte_bound_reaches_an_http2_reader_that_keeps_up(
        daemon_factory: DaemonFactory):
    """A client is dropped when it is 32 MiB behind; one event whose frame alone is past that (6 MiB
    of a control character, escaped as ``\\u0001`` in the JSON: 36 MiB) is no lateness for a reader
    taking it as it comes. On the path where the stream's task writes (HTTP/2) it gets the frame
    whole and the next event after it, with no ``stream.dropped``."""
    d = await daemon_factory(config={"server": {"maxBodyBytes": 64 * 1024 * 1024}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "busy", BUSY)  # the run holds: each input below is one event
    await d.wait_running_call(token, sid)
    text = "\x01" * (6 * 1024 * 1024)
    async with await trio.open_tcp_stream("127.0.0.1", d.port) as tcp, trio.open_nursery() as nursery:
        client = H2Client(tcp, d.port)
        client.get(1, f"/events/stream?session={sid}", token)
        nursery.start_soon(client.run)
        await client.until(lambda: b": lens stream\n\n" in client.data[1])
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "big", "content": text}, timeout=60)
        assert r.status_code == 202, r.text
        big = r.json()["seq"]
        small = (await d.submit(token, sid, "small", "small"))["seq"]

        def ended() -> bool:  # (the tail alone: the body is tens of MB)
            tail = bytes(client.data[1][-4096:])
            return f"id: {small}\n".encode() in tail and tail.endswith(b"\n\n") or b"\nevent: stream." in tail
        await client.until(ended, timeout=60)
        blocks = [parse_block(b) for b in frames(client.data[1])]
        assert [(m.id, m.event) for m in blocks] == [(big, "input.submitted"), (small, "input.submitted")]
        assert len(blocks[0].data) > 32 * 1024 * 1024
        assert blocks[0].json()["body"]["content"][0]["text"] == text
        assert not client.resets
        nursery.cancel_scope.cancel()
    await d.post(f"/sessions/{sid}/abort", token)


async def test_a_deleted_sessions_stream_replays_to_its_deletion_and_stays_open(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 0.2}})
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    r = await d.request("DELETE", f"/sessions/{sid}", token, json_body={})
    assert r.status_code == 200, r.text
    logged = [e["seq"] for e in await d.events(token, sid)]
    async with d.sse(token, params={"session": sid}, last_event_id=0) as stream:
        last = await stream.until(lambda m: m.id == logged[-1])
        assert last.event == "session.deleted" and stream.seqs == logged
        assert (await stream.next()).comment == "ping"  # open, and quiet but for heartbeats
