"""F-API-5 by property testing: what every subscriber of ``GET /events/stream`` sees, whatever its
filter, its start, where its connections are cut and how slowly it reads.

One daemon (loopback port 0, faux sessions in two projects, a real executor child) serves the
whole test; hypothesis (derandomized, in a worker thread) draws each example — writes into the
sessions (plain answers, tool calls, streamed answers, subagents, bursts of large inputs, an
input to a deleted session) and one to three subscribers — and runs it on the daemon's event loop
(``trio.from_thread.run``). A subscriber is a raw HTTP/1.1 or HTTP/1.0 client on a socket with a
small receive buffer (so a reader that pauses fills it, and the bus must drop it): a filter (none,
a session, a project, both, a session with another project's filter, a deleted session), a start
(live, ``Last-Event-ID`` or ``?after=``), connections cut after a drawn number of body bytes
(mid-frame too), pauses until the writes are done, and a last connection read to the end. Each connection
resumes from the last ``id:`` the client saw (or the ``lastEventId`` of a ``stream.dropped``).

The properties, per subscriber: the ids of every connection, concatenated (deduplicated by
nothing), are exactly the log's events matching the filter after the start, in ``seq`` order, each
once; each frame is ``id:`` / ``event:`` / ``data:`` with the decoded event (as ``lens log decode``
prints it, itself checked against the ``/events`` pages); a ``stream.dropped`` names no id before the
last one the connection delivered; ``model.delta`` and ``model.partial`` frames carry no id, a partial comes
before the connection's deltas, and partial + deltas is what the answer's ``model.responded`` says.

Nothing waits for time: every wait is on a condition (an event of the test, a seq in the log).
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .conftest import API, LIMIT, Daemon, DaemonFactory, parse_block, run_lens, stop_daemon

CONFIG = {
    "server": {"sseBufferEvents": 8},
    "providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "stream please", "reasoning": "Let me see. ", "chunks": ["One, ", "two, ", "three."]},
        {"when": "stream slowly", "chunks": ["Slow ", "and ", "steady ", "to ", "the end."], "chunkDelayMs": 40},
        {"when": "delegate", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBTASK say noon"}}]},
        {"when": "SUBTASK", "chunks": ["no", "on"]},
    ]}],
    "defaultModel": "faux/faux-1",
}
PROMPTS = ["hello", '/tool get_system_time {}', "stream please", "stream slowly", "delegate"]
BIG = 192 * 1024  # one large input: a few of them fill a paused reader's socket and the daemon's send buffer
TERMINAL = ("stream.dropped", "stream.end")


# --------------------------------------------------------------------------- a raw SSE client


class Conn:
    """One stream over a trio socket with a small receive buffer; the chunked body decoded by
    hand, so that a test can stop after any number of body bytes."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.chunked = True  # False: an HTTP/1.0 response, its body delimited by the connection's end
        self.raw = b""
        self.remaining = 0  # bytes left in the current chunk
        self.crlf = False  # the CRLF after a chunk is due
        self.eof = False

    @classmethod
    async def open(cls, port: int, token: str, params: dict[str, str], last_event_id: int | None,
                   http: str = "1.1") -> "Conn":
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        query = f"?{urlencode(params)}" if params else ""
        resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
        await sock.send(f"GET {API}/events/stream{query} HTTP/{http}\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Authorization: Bearer {token}\r\n{resume}\r\n".encode())
        c = cls(sock)
        while b"\r\n\r\n" not in c.raw:
            data = await sock.recv(65536)
            assert data, "the connection closed before the response's head"
            c.raw += data
        head, _, c.raw = c.raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), (head, c.raw)
        c.chunked = http == "1.1"
        assert (b"transfer-encoding: chunked" in head.lower()) == c.chunked, head
        return c

    async def body(self) -> bytes:
        """The next bytes of the body (``b""`` at its end)."""
        while True:
            if not self.chunked:
                if self.raw:
                    out, self.raw = self.raw, b""
                    return out
            elif self.remaining:
                if self.raw:
                    out, self.raw = self.raw[:self.remaining], self.raw[self.remaining:]
                    self.remaining -= len(out)
                    self.crlf = not self.remaining
                    return out
            elif self.crlf:
                if len(self.raw) >= 2:
                    assert self.raw[:2] == b"\r\n", self.raw[:20]
                    self.raw, self.crlf = self.raw[2:], False
                    continue
            elif b"\r\n" in self.raw:
                line, _, self.raw = self.raw.partition(b"\r\n")
                self.remaining = int(line.split(b";")[0], 16)
                if not self.remaining:
                    self.eof = True
                    return b""
                continue
            data = await self.sock.recv(65536)
            if not data:
                self.eof = True
                return b""
            self.raw += data

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- what a subscriber did


@dataclass
class Frame:
    id: int | None
    event: str | None
    data: str
    raw: bytes


@dataclass
class Connection:
    resumed_from: int | None  # the Last-Event-ID / after it sent (None: live)
    before: int = 0  # the log's last seq before it connected
    greeted: int | None = None  # ... and once its opening comment arrived (it subscribed in between)
    frames: list[Frame] = field(default_factory=list)
    ended_by: str = ""  # "cut", "done", or the final event's name


@dataclass
class Subscriber:
    name: str
    params: dict[str, str]
    matches: Any  # decoded event (dict) -> whether the filter covers it
    via: str  # "header" | "query"
    http: str  # "1.1" (the bus writes to the socket itself) | "1.0" (every write goes through the server)
    steps: list[tuple[str, int]]  # ("cut", n body bytes) | ("pause", 0), then a last connection to the end
    position: int | None  # where the next connection resumes (None: live)
    lo: int = 0  # the client's start lies in [lo, hi]
    hi: int = 0
    connections: list[Connection] = field(default_factory=list)

    @property
    def seen(self) -> list[int]:
        return [f.id for c in self.connections for f in c.frames if f.id is not None]


def parse_frame(block: bytes) -> Frame:
    msg = parse_block(block)
    return Frame(msg.id, msg.event, msg.data, block)


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    d: Daemon
    token: str
    projects: dict[str, str]  # "A", "B" -> project id
    sessions: dict[str, str]  # "a1", "a2", "b1", "burst", "gone" -> session id
    project_of: dict[str, str]  # session id -> project id
    done: trio.Event = field(default_factory=trio.Event)
    final: int = 0  # the last seq once the writes are done
    log: list[dict[str, Any]] = field(default_factory=list)  # decoded events up to ``final``
    counter: int = 0
    drops: int = 0
    partials: int = 0


FILTERS = ["all", "session a1", "session b1", "project A", "project B", "a1 in A", "a1 in B", "gone"]


def filter_of(w: World, name: str) -> tuple[dict[str, str], Any]:
    s, p = w.sessions, w.projects
    if name == "all":
        return {}, lambda e: True
    if name.startswith("session "):
        sid = s[name.split()[1]]
        return {"session": sid}, lambda e: e["session_id"] == sid
    if name.startswith("project "):
        pid = p[name.split()[1]]
        return {"project": pid}, lambda e: e["project_id"] == pid
    if name == "gone":
        sid = s["gone"]
        return {"session": sid}, lambda e: e["session_id"] == sid
    sid, pid = s["a1"], p[name.split()[-1]]
    return {"session": sid, "project": pid}, lambda e: e["session_id"] == sid and e["project_id"] == pid


async def last_seq(w: World) -> int:
    return (await w.d.get("/health")).json()["lastSeq"]


async def decode_log(w: World) -> list[dict[str, Any]]:
    out = await run_lens(w.d.root, "log", "decode", "--data", str(w.d.data_dir))
    return [json.loads(line) for line in out.stdout.splitlines()]


# --------------------------------------------------------------------------- one example


WRITES = st.lists(st.tuples(st.sampled_from(["a1", "a2", "b1", "gone"]), st.sampled_from(PROMPTS)) |
                  st.just(("burst", "burst")), min_size=1, max_size=5)
STEP = st.tuples(st.just("cut"), st.integers(1, 200) | st.integers(200, 6000)) | st.just(("pause", 0))
SUBSCRIBER = st.fixed_dictionaries({
    "filter": st.sampled_from(FILTERS),
    "start": st.sampled_from(["live", "zero", "current"]) | st.floats(0, 1),
    "via": st.sampled_from(["header", "query"]),
    "http": st.sampled_from(["1.1", "1.0"]),
    "steps": st.lists(STEP, max_size=3),
})


async def write(w: World, plan: list[tuple[str, str]]) -> None:
    """The example's writes; then every session idle, and ``w.final`` / ``w.log`` set."""
    for where, what in plan:
        w.counter += 1
        if where == "burst":
            for i in range(6):
                await w.d.submit(w.token, w.sessions["burst"], f"big{w.counter}-{i}", f"{i} " + "x" * BIG)
            continue
        r = await w.d.post(f"/sessions/{w.sessions[where]}/inputs", w.token,
                           {"requestId": f"r{w.counter}", "content": what})
        assert r.status_code == (409 if where == "gone" else 202), r.text
    for name in ("a1", "a2", "b1", "burst"):
        await w.d.wait_idle(w.token, w.sessions[name])
    w.final = await last_seq(w)
    w.log = [e for e in await decode_log(w) if e["seq"] <= w.final]
    assert [e["seq"] for e in w.log] == list(range(1, w.final + 1))
    w.done.set()


def needed(w: World, sub: Subscriber) -> int | None:
    """Once the writes are done: the last seq the subscriber must still read (None: nothing)."""
    after = sub.position if sub.position is not None else sub.hi
    want = [e["seq"] for e in w.log if e["seq"] > after and sub.matches(e)]
    return want[-1] if want else None


def satisfied(w: World, sub: Subscriber) -> bool:
    if not w.done.is_set():
        return False
    target = needed(w, sub)
    return target is None or (bool(sub.seen) and sub.seen[-1] >= target)


async def connect(w: World, sub: Subscriber, mode: str, cut: int) -> None:
    """One connection: resume, read (pause first, or stop after ``cut`` body bytes), record."""
    resume = sub.position
    params = dict(sub.params)
    if resume is not None and sub.via == "query":
        params["after"] = str(resume)
    before = await last_seq(w)
    if resume is None and not sub.connections:
        sub.lo = before  # a live start: no earlier than this
    c = await Conn.open(w.d.port, w.token, params, resume if sub.via == "header" else None, sub.http)
    conn = Connection(resume, before)
    sub.connections.append(conn)
    text = b""
    got = 0
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:  # the writes done and nothing more to read: stop reading
                await w.done.wait()
                if satisfied(w, sub):
                    nursery.cancel_scope.cancel()
                await stop.wait()

            async def read() -> None:
                nonlocal text, got
                first = True
                while True:
                    data = await c.body()
                    if not data:
                        conn.ended_by = conn.ended_by or "eof"
                        break
                    if mode == "cut" and got + len(data) >= cut:
                        data = data[:cut - got]
                    got += len(data)
                    text += data
                    while b"\n\n" in text:
                        block, _, text = text.partition(b"\n\n")
                        frame = parse_frame(block)
                        if first:
                            assert block == b": lens stream", block  # the opening comment, once subscribed
                            first = False
                            conn.greeted = await last_seq(w)
                            if resume is None and not sub.seen:
                                sub.hi = conn.greeted  # ... and no later than this
                            if mode == "pause":
                                await w.done.wait()
                            if satisfied(w, sub):
                                conn.ended_by = "done"
                                nursery.cancel_scope.cancel()
                                return
                            continue
                        if frame.event is None:
                            assert block.startswith(b":"), block  # heartbeats
                            continue
                        conn.frames.append(frame)
                        if frame.event in TERMINAL:
                            conn.ended_by = frame.event
                            nursery.cancel_scope.cancel()
                            return
                        if satisfied(w, sub):
                            conn.ended_by = "done"
                            nursery.cancel_scope.cancel()
                            return
                    if mode == "cut" and got >= cut:
                        conn.ended_by = "cut"
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch)
            nursery.start_soon(read)
    finally:
        stop.set()
        c.close()
    if not conn.ended_by:
        conn.ended_by = "done"
    # the next connection resumes from the last id this one saw (or what a final event names)
    ids = [f.id for f in conn.frames if f.id is not None]
    if ids:
        sub.position = ids[-1]
    if conn.frames and conn.frames[-1].event in TERMINAL:
        # what it names: no earlier than what the connection delivered (it may be later: a
        # filtered replay reads past events of other sessions); resuming from it loses nothing,
        # which the concatenation checks
        named = json.loads(conn.frames[-1].data)["lastEventId"]
        floor = ids[-1] if ids else resume
        assert floor is None or named >= floor, (sub.name, conn.frames[-1].data, floor)
        sub.position = named
        w.drops += conn.frames[-1].event == "stream.dropped"


async def follow(w: World, sub: Subscriber) -> None:
    for mode, n in sub.steps:
        await connect(w, sub, mode, n)
    while True:
        await connect(w, sub, "to end", 0)
        if satisfied(w, sub):
            return
        assert sub.connections[-1].ended_by in TERMINAL, sub.connections[-1].ended_by


async def run_example(w: World, plan: list[tuple[str, str]], drawn: list[dict[str, Any]]) -> None:
    w.done = trio.Event()
    now = await last_seq(w)
    subs = []
    for i, spec in enumerate(drawn):
        params, matches = filter_of(w, spec["filter"])
        start = spec["start"]
        position = (None if start == "live" else 0 if start == "zero" else now if start == "current"
                    else round(start * now))
        subs.append(Subscriber(f"{i}:{spec['filter']}:{start}", params, matches, spec["via"], spec["http"],
                               spec["steps"],
                               position, lo=position or 0, hi=position or 0))
    with trio.fail_after(LIMIT * 6):
        async with trio.open_nursery() as nursery:
            for sub in subs:
                nursery.start_soon(follow, w, sub)
            nursery.start_soon(write, w, plan)
    by_seq = {e["seq"]: e for e in w.log}
    for sub in subs:
        check(w, sub, by_seq)


def check(w: World, sub: Subscriber, by_seq: dict[int, dict[str, Any]]) -> None:
    seen = sub.seen
    # 1. exactly the matching events after the start, in order, each once
    wanted = [e["seq"] for e in w.log if e["seq"] > sub.lo and sub.matches(e)]
    skipped = len(wanted) - len(seen)
    assert skipped >= 0 and wanted[skipped:] == seen, (sub.name, sorted(set(wanted) - set(seen))[:10],
                                                       sorted(set(seen) - set(wanted))[:10])
    assert all(s <= sub.hi for s in wanted[:skipped]), (sub.name, wanted[:skipped], sub.hi)
    for conn in sub.connections:
        for f in conn.frames:
            # 2. each frame: id / event / data of the decoded event; ephemeral ones carry no id
            if f.id is not None:
                e = by_seq[f.id]
                assert f.raw.split(b"\n")[:2] == [f"id: {f.id}".encode(), f"event: {e['kind']}".encode()], f.raw[:200]
                assert len(f.raw.split(b"\n")) == 3 and json.loads(f.data) == e, (sub.name, f.id)
                assert sub.matches(e)
            else:
                assert f.event in ("model.delta", "model.partial", *TERMINAL), f.raw[:200]
                if f.event not in TERMINAL:
                    body = json.loads(f.data)
                    sid = body["session_id"]
                    assert sub.matches({"session_id": sid, "project_id": w.project_of[sid]}), (sub.name, body)
        check_partials(w, sub, conn)


def check_partials(w: World, sub: Subscriber, conn: Connection) -> None:
    """A partial comes before the connection's deltas; it is the start of its request's answer,
    and partial + the deltas after it are the whole answer."""
    frames = conn.frames
    kinds = [f.event for f in frames]
    if "model.partial" not in kinds:
        return
    first_delta = kinds.index("model.delta") if "model.delta" in kinds else len(kinds)
    assert max(i for i, k in enumerate(kinds) if k == "model.partial") < first_delta, kinds
    ids = [f.id for f in frames[:kinds.index("model.partial")] if f.id is not None]
    # Where the connection joined: exactly after its last replayed event of the session (its
    # filter covers the session); a live start somewhere between connecting and the greeting.
    exact = bool(ids) or conn.resumed_from is not None
    joined = ids[-1] if ids else conn.resumed_from if conn.resumed_from is not None else conn.before
    for i, f in enumerate(frames):
        if f.event != "model.partial":
            continue
        w.partials += 1
        p = json.loads(f.data)
        sid, agent, kind = p["session_id"], p["agent_id"], p["kind"]
        assert sub.matches({"session_id": sid, "project_id": w.project_of[sid]}), (sub.name, p)
        ends = [e for e in w.log if e["seq"] > joined and e["session_id"] == sid and e["agent_id"] == agent
                and e["kind"] in ("model.responded", "model.failed")]
        assert ends, (sub.name, p)
        if not exact:  # a request that ended before the stream joined may come first
            ends = ends[:1 + sum(e["seq"] <= (conn.greeted or joined) for e in ends)]
            assert any(e["kind"] == "model.responded" and e["body"][kind].startswith(p["text"]) for e in ends), (
                sub.name, p, ends)
            continue
        end = ends[0]
        assert end["kind"] == "model.responded", (sub.name, p, end)
        assert end["body"][kind].startswith(p["text"]), (sub.name, p, end["body"])
        at = [g.id for g in frames].index(end["seq"]) if end["seq"] in [g.id for g in frames] else None
        if at is not None:  # the connection saw the answer committed: partial + deltas = answer
            deltas = [json.loads(g.data) for g in frames[i + 1:at] if g.event == "model.delta"]
            text = "".join(d["text"] for d in deltas
                           if (d["session_id"], d["agent_id"], d["kind"]) == (sid, agent, kind))
            assert p["text"] + text == end["body"][kind], (sub.name, p, deltas, end["body"])


# --------------------------------------------------------------------------- the test


async def setup_world(d: Daemon) -> World:
    token = await d.pair("sse-properties", strong=True)
    a, b = (await d.project(token, "A"))["id"], (await d.project(token, "B"))["id"]
    sessions = {name: (await d.session(token, pid))["id"]
                for name, pid in (("a1", a), ("a2", a), ("b1", b), ("burst", b), ("gone", a))}
    await d.submit(token, sessions["gone"], "g1", "stream please")
    await d.wait_idle(token, sessions["gone"])
    r = await d.request("DELETE", f"/sessions/{sessions['gone']}", token)
    assert r.status_code == 200, r.text
    project_of = {sid: (a if name in ("a1", "a2", "gone") else b) for name, sid in sessions.items()}
    return World(d, token, {"A": a, "B": b}, sessions, project_of)


async def test_every_subscriber_sees_exactly_its_events_once_in_order(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config=CONFIG)
    w = await setup_world(d)
    token = trio.lowlevel.current_trio_token()

    @settings(max_examples=int(os.environ.get("LENS_SSE_EXAMPLES", 14)), deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(plan=WRITES, drawn=st.lists(SUBSCRIBER, min_size=1, max_size=3))
    # always: a reader that pauses through a burst (dropped, resumes), and readers joining and
    # cut while an answer streams (partials)
    @example(plan=[("burst", "burst"), ("a1", "hello")], drawn=[
        {"filter": "project B", "start": "live", "via": "header", "http": "1.1", "steps": [("pause", 0)]},
        {"filter": "all", "start": "current", "via": "query", "http": "1.0", "steps": [("pause", 0), ("pause", 0)]}])
    @example(plan=[("a1", "stream slowly"), ("a2", "delegate"), ("b1", "stream slowly")], drawn=[
        {"filter": "session a1", "start": "live", "via": "header", "http": "1.1", "steps": [("cut", 700)] * 3},
        {"filter": "project A", "start": 0.5, "via": "query", "http": "1.0", "steps": [("cut", 2000)] * 3},
        {"filter": "all", "start": "current", "via": "header", "http": "1.1", "steps": [("cut", 1500)] * 3}])
    def prop(plan: list[tuple[str, str]], drawn: list[dict[str, Any]]) -> None:
        trio.from_thread.run(run_example, w, plan, drawn, trio_token=token)

    await trio.to_thread.run_sync(prop)
    # the decoded log the frames were checked against is the one the /events pages serve
    decoded = await decode_log(w)
    for sid in w.sessions.values():
        assert await d.events(w.token, sid) == [e for e in decoded if e["session_id"] == sid]
    print(f"drops: {w.drops}, partials checked: {w.partials}")


async def test_streams_ended_by_a_restart_resume_exactly_on_the_next_daemon(daemon_factory: DaemonFactory) -> None:
    """A shutdown is one more place a connection ends: each stream gets ``stream.end`` naming the
    last id it delivered, and resuming from it on the restarted daemon (same data, same pair
    file) loses and repeats nothing, an answer cut by the stop included."""
    d = await daemon_factory(config=CONFIG)
    w = await setup_world(d)
    a1, b1 = w.sessions["a1"], w.sessions["b1"]
    filters = [{}, {"session": a1}, {"project": w.projects["B"]}, {"session": a1, "project": w.projects["B"]}]
    seen: list[list[int]] = [[] for _ in filters]
    async with AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(d.sse(w.token, params=f, last_event_id=0)) for f in filters]
        await d.submit(w.token, b1, "before", "hello")
        await d.wait_idle(w.token, b1)
        await d.submit(w.token, a1, "cut", "stream slowly")
        await streams[0].until(lambda m: m.event == "model.delta")  # the answer is streaming: stop now
        d.stop.set()
        for stream, ids in zip(streams, seen):
            end = await stream.until(lambda m: m.event in TERMINAL)
            assert end.event == "stream.end" and end.json()["reason"] == "shutdown", end
            ids += stream.seqs
            assert end.json()["lastEventId"] >= (ids[-1] if ids else 0), (end.data, ids[-3:])
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    async with AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(d2.sse(w.token, params=f, last_event_id=ids[-1] if ids else 0))
                   for f, ids in zip(filters, seen)]
        await d2.wait_idle(w.token, a1)  # the cut answer is asked again and committed
        await d2.submit(w.token, b1, "after", "stream please")
        await d2.wait_idle(w.token, b1)
        log = [json.loads(line) for line in (await run_lens(d2.root, "log", "decode", "--data",
                                                            str(d2.data_dir))).stdout.splitlines()]
        for f, stream, ids in zip(filters, streams, seen):
            want = [e for e in log if all(e[{"session": "session_id", "project": "project_id"}[k]] == v
                                          for k, v in f.items())]
            if want and (not ids or want[-1]["seq"] > ids[-1]):
                await stream.until(lambda m: m.id == want[-1]["seq"])
            frames = [m for m in stream.messages if m.id is not None]
            assert ids + [m.id for m in frames] == [e["seq"] for e in want], f
            assert [m.json() for m in frames] == want[len(ids):]
