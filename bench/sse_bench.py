"""SSE fan-out benchmark: append→delivery latency at N live subscribers, and the writer's cost.

Usage::

    python bench/sse_bench.py [--subscribers N] [--rate R] [--seconds S] [--sessions K] [--json] [--quick]

What one run measures, side by side on the same machine (see docs/performance.md):

* The **real daemon** (``lens serve --port 0``) runs in a **subprocess**, in a fresh temporary
  working directory with its own data directory and ``config/pair.json`` (a strong-trust
  credential minted with :class:`runtime.pairing.PairStore` before it starts; built-in config,
  so the ``faux`` provider answers every turn). All traffic stays on 127.0.0.1.
* **The writer** is HTTP, through the daemon's real path: ``K`` session clients ``POST
  /api/v1/sessions/{id}/inputs`` on keep-alive connections, paced (open loop, one request in
  flight per session) so that the *offered* load is ``R`` logged events/s. With the faux
  provider one submit commits 6 logged events (input.submitted, task.started, input.placed,
  model.requested, model.responded, task.finished; each ``seq`` goes through the group-commit
  store and the bus) plus one ephemeral ``model.delta`` frame (no ``id``, also fanned out).
  **Writer throughput** = logged events the daemon *committed* with ``ts`` inside the timed
  window, divided by the window (read back from ``events.db`` after the phase); the submit acks
  (HTTP 202 = input.submitted durable) are counted and timed too.
* **Subscribers**: ``N`` raw trio TCP clients in this process, each ``GET
  /api/v1/events/stream`` with the Bearer credential (HTTP/1.1, chunked), all unfiltered (every
  subscriber receives every event). Each records the arrival time of every chunk it reads and
  the ``id:`` values in it. **Append→delivery latency** of one event at one subscriber =
  arrival time (``time.time()``) − the event's ``ts`` (the store stamps ``ts`` in ms when its
  group-commit transaction starts, so the figure includes the durable commit, the bus, the HTTP
  server, the loopback socket and this process's own scheduling; ``ts`` is truncated to the
  millisecond, so figures read up to 1 ms high). Every (event, subscriber) pair in the window
  counts.
* Two phases, each on a fresh daemon and data directory: **baseline** (the same writer, no
  subscriber) and **fan-out** (``N`` subscribers connected and streaming before the window
  opens). The throughput ratio fan-out / baseline is the target's "writer throughput drop".

The daemon and this process share the machine's cores (the client side parses ~``N × R``
frames/s), which is the honest single-machine setting; daemon and bench CPU seconds are
reported. It prints a Markdown table and, as its last stdout line, one JSON object.
Every loop is bounded; the daemon is stopped (SIGTERM, then kill) whatever happens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402
import msgspec  # noqa: E402
import trio  # noqa: E402

from events.schema import open_read_connection  # noqa: E402
from runtime.pairing import PairStore  # noqa: E402

HOST = "127.0.0.1"
EVENTS_PER_SUBMIT = 6  # logged events per faux turn (see the module docstring)
CLIENT_ID = "sse-bench"

DEFAULTS = dict(subscribers=500, rate=1000.0, seconds=10.0, sessions=50)
QUICK = dict(subscribers=20, rate=1000.0, seconds=2.0, sessions=25)

TARGET_P99_MS = 100.0
TARGET_THROUGHPUT_RATIO = 0.9  # "drops < 10 %"

START_TIMEOUT = 30.0
CONNECT_TIMEOUT = 60.0
DRAIN_TIMEOUT = 10.0
RECV_BYTES = 1 << 20

ID_RE = re.compile(rb"^id: (\d+)\r?$", re.M)  # the definition of an id line; ids_in() is its fast form


def ids_in(buf: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, int, int] | None:
    """(first id, last id, number of id lines) in ``buf[lo:hi]`` (whole lines from a line start).

    The same result as ``ID_RE.findall(buf[lo:hi])`` on the daemon's frames (``data:`` lines are
    JSON, which has no raw newline, so ``id: `` after a newline only starts an id line), but with
    bounded ``bytes`` searches and no copy: the regex scans ~170 MB/s per core, and at full size
    the subscribers receive ~200 MB/s, so a regex-parsing client mostly measured its own CPU.
    """
    if hi is None:
        hi = len(buf)
    n = buf.count(b"\nid: ", lo, hi)
    head = buf.startswith(b"id: ", lo, hi)
    if head:
        n += 1
    if not n:
        return None
    i = lo if head else buf.find(b"\nid: ", lo, hi) + 1
    j = buf.rfind(b"\nid: ", lo, hi) + 1 if n > 1 or not head else lo
    first = int(buf[i + 4:buf.index(b"\n", i, hi)])
    last = first if j == i else int(buf[j + 4:buf.index(b"\n", j, hi)])
    return first, last, n


def _join(a: tuple[int, int, int] | None, b: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    if a is None or b is None:
        return a if b is None else b
    return a[0], b[1], a[2] + b[2]


# --------------------------------------------------------------------------- daemon subprocess


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    workdir: Path
    data: Path

    def cpu_seconds(self) -> float:
        """utime + stime of the daemon process so far (Linux /proc; 0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_daemon(workdir: Path) -> Daemon:
    """``lens serve --port 0`` in ``workdir`` (built-in config), with a fresh credential."""
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "ws").mkdir(exist_ok=True)
    pairs = PairStore(workdir / "config" / "pair.json")  # the daemon's default pair file here
    pairs.register(CLIENT_ID, "sse bench", 32)
    token = pairs.approve(CLIENT_ID, strong=True)
    data = workdir / "data"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    log = open(workdir / "daemon.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "serve", "--host", HOST, "--port", "0", "--data", str(data)],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
    )
    log.close()
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT
    buf = b""
    port = None
    try:
        while port is None:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise RuntimeError(f"the daemon did not start; see {workdir / 'daemon.log'}: "
                                   + (workdir / "daemon.log").read_text()[-2000:])
            if not sel.select(timeout=min(left, 0.5)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                continue
            buf += chunk
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", buf)
            if m:
                port = int(m.group(1))
    except BaseException:
        Daemon(proc, 0, token, workdir, data).stop()
        raise
    finally:
        sel.close()
    return Daemon(proc, port, token, workdir, data)


# --------------------------------------------------------------------------- a tiny HTTP/1.1 client


class Http:
    """One keep-alive HTTP/1.1 connection (JSON requests, Content-Length responses)."""

    def __init__(self, stream: trio.SocketStream, port: int, token: str) -> None:
        self.stream = stream
        self.head = f"Host: {HOST}:{port}\r\nAuthorization: Bearer {token}\r\n".encode()
        self.buf = b""

    @classmethod
    async def connect(cls, port: int, token: str) -> "Http":
        return cls(await trio.open_tcp_stream(HOST, port), port, token)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        raw = msgspec.json.encode(body) if body is not None else b""
        req = (f"{method} {path} HTTP/1.1\r\n".encode() + self.head
               + b"Content-Type: application/json\r\nContent-Length: " + str(len(raw)).encode()
               + b"\r\n\r\n" + raw)
        await self.stream.send_all(req)
        while b"\r\n\r\n" not in self.buf:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(rest) < length:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            rest += chunk
        self.buf = rest[length:]
        payload = rest[:length]
        return status, (msgspec.json.decode(payload) if payload else None)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def expect(http: Http, method: str, path: str, body: Any, status: int) -> Any:
    got, data = await http.request(method, path, body)
    if got != status:
        raise RuntimeError(f"{method} {path}: HTTP {got} {data!r}")
    return data


# --------------------------------------------------------------------------- subscribers


@dataclass(eq=False)
class Sub:
    """What one subscriber saw: per chunk read, its arrival time and the ids in it."""

    t_ms: array = field(default_factory=lambda: array("d"))
    first: array = field(default_factory=lambda: array("q"))
    last: array = field(default_factory=lambda: array("q"))
    count: array = field(default_factory=lambda: array("q"))
    bytes: int = 0
    dropped: bool = False
    ended: bool = False
    error: str | None = None
    max_seq: int = 0


async def subscriber(port: int, token: str, sub: Sub, ready: "Counter", gate: trio.CapacityLimiter) -> None:
    """One SSE client; runs until its stream ends or the phase cancels it."""
    async with gate:  # connect in waves (the listen backlog is finite)
        try:
            stream = await trio.open_tcp_stream(HOST, port)
        except OSError as exc:
            sub.error = f"connect: {exc}"
            ready.fail()
            return
        await stream.send_all(
            f"GET /api/v1/events/stream HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode())
        buf = b""
        while b"lens stream" not in buf:  # headers, then the opening comment (subscribed)
            chunk = await stream.receive_some(RECV_BYTES)
            if not chunk:
                sub.error = "closed before the stream opened"
                ready.fail()
                await stream.aclose()
                return
            buf += chunk
        if not buf.startswith(b"HTTP/1.1 200"):
            sub.error = buf.split(b"\r\n", 1)[0].decode(errors="replace")
            ready.fail()
            await stream.aclose()
            return
        ready.ok()
    async with stream:
        carry = b""  # the incomplete last line of the previous chunk
        t_ms, first, last, count = sub.t_ms, sub.first, sub.last, sub.count
        now = time.time
        while True:
            chunk = await stream.receive_some(RECV_BYTES)
            t = now() * 1000.0
            if not chunk:
                sub.ended = True
                return
            sub.bytes += len(chunk)
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry = carry + chunk if len(carry) < 64 else b"x"
                continue
            if carry:  # the line cut off at the end of the previous read, completed
                nl = chunk.find(b"\n", 0, cut + 1)
                head = carry + chunk[:nl + 1]
                ids = _join(ids_in(head), ids_in(chunk, nl + 1, cut + 1))
                marker = head.find(b"event: stream.") >= 0
            else:
                nl = -1
                ids = ids_in(chunk, 0, cut + 1)
                marker = False
            carry = chunk[cut + 1:]
            if len(carry) > 64:
                carry = b"x"  # the middle of a long data line: no id there
            if ids is not None:
                a, b, c = ids
                t_ms.append(t)
                first.append(a)
                last.append(b)
                count.append(c)
                sub.max_seq = b
            if not marker and chunk.find(b"event: stream.", nl + 1, cut + 1) < 0:
                continue
            seg = (head if nl >= 0 else b"") + chunk[nl + 1:cut + 1]
            if b"event: stream.dropped" in seg:
                sub.dropped = True
                return
            if b"event: stream.end" in seg:
                sub.ended = True
                return


class Counter:
    def __init__(self, n: int) -> None:
        self.n, self.good, self.bad = n, 0, 0
        self.done = trio.Event()

    def ok(self) -> None:
        self.good += 1
        self._check()

    def fail(self) -> None:
        self.bad += 1
        self._check()

    def _check(self) -> None:
        if self.good + self.bad >= self.n:
            self.done.set()


# --------------------------------------------------------------------------- the writer


@dataclass
class WriterResult:
    acks: int = 0
    acks_in_window: int = 0  # acks that arrived before the window closed
    errors: int = 0
    ack_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)  # how far behind schedule each send was


async def writer(port: int, token: str, sessions: list[str], rate: float, seconds: float,
                 t0: float, res: WriterResult) -> None:
    """Open-loop pacing: submit i (round robin over sessions) is due at t0 + i / submits_per_s."""
    per_s = rate / EVENTS_PER_SUBMIT
    k = len(sessions)

    async def one(j: int, sid: str) -> None:
        http = await Http.connect(port, token)
        try:
            i = j
            while True:
                due = t0 + i / per_s
                if due >= t0 + seconds:
                    return
                now = trio.current_time()
                if due > now:
                    await trio.sleep_until(due)
                res.late_ms.append(max(0.0, (trio.current_time() - due) * 1000))
                s = time.perf_counter()
                status, _ = await http.request("POST", f"/api/v1/sessions/{sid}/inputs",
                                               {"requestId": f"r{i}", "content": f"bench message {i}"})
                if status == 202:
                    res.acks += 1
                    if trio.current_time() < t0 + seconds:
                        res.acks_in_window += 1
                    res.ack_ms.append((time.perf_counter() - s) * 1000)
                else:
                    res.errors += 1
                i += k
        finally:
            await http.aclose()

    async with trio.open_nursery() as n:
        for j, sid in enumerate(sessions):
            n.start_soon(one, j, sid)


# --------------------------------------------------------------------------- one phase


def pct(sorted_values: list[float] | array, p: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, math.ceil(p / 100 * len(sorted_values)) - 1))
    return float(sorted_values[i])


async def run_phase(d: Daemon, *, subscribers: int, rate: float, seconds: float, n_sessions: int) -> dict[str, Any]:
    http = await Http.connect(d.port, d.token)
    project = await expect(http, "POST", "/api/v1/projects",
                           {"name": "sse-bench", "workspace": str(d.workdir / "ws")}, 201)
    sessions = []
    for _ in range(n_sessions):
        s = await expect(http, "POST", "/api/v1/sessions", {"projectId": project["id"]}, 201)
        sessions.append(s["id"])
    for sid in sessions:  # warm each session up with one turn
        await expect(http, "POST", f"/api/v1/sessions/{sid}/inputs", {"requestId": "warm", "content": "warm"}, 202)
    await http.aclose()
    await trio.sleep(0.5)

    subs = [Sub() for _ in range(subscribers)]
    ready = Counter(subscribers)
    wres = WriterResult()
    out: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        if subscribers:
            gate = trio.CapacityLimiter(50)
            for s in subs:
                nursery.start_soon(subscriber, d.port, d.token, s, ready, gate)
            with trio.move_on_after(CONNECT_TIMEOUT):
                await ready.done.wait()
            if ready.good < subscribers:
                raise RuntimeError(f"only {ready.good} of {subscribers} subscribers connected "
                                   f"({[s.error for s in subs if s.error][:3]})")
            await trio.sleep(0.5)
        cpu_d0, cpu_b0 = d.cpu_seconds(), time.process_time()
        t0 = trio.current_time() + 0.05
        wall0 = time.time() + 0.05
        await writer(d.port, d.token, sessions, rate, seconds, t0, wres)
        wall1 = wall0 + seconds
        # let the last turns commit and reach every subscriber (bounded)
        with trio.move_on_after(DRAIN_TIMEOUT):
            await trio.sleep(0.3)
            if subscribers:
                http = await Http.connect(d.port, d.token)
                _, health = await http.request("GET", "/api/v1/health")
                await http.aclose()
                target = health["lastSeq"]
                while any(s.max_seq < target and not (s.dropped or s.ended or s.error) for s in subs):
                    await trio.sleep(0.05)
        out["daemon_cpu_s"] = d.cpu_seconds() - cpu_d0
        out["bench_cpu_s"] = time.process_time() - cpu_b0
        nursery.cancel_scope.cancel()

    # committed events and their ts, read back from the log
    conn = open_read_connection(d.data)
    try:
        ts = dict(conn.execute("SELECT seq, ts FROM events"))
    finally:
        conn.close()
    lo, hi = wall0 * 1000, wall1 * 1000
    window = {seq: t for seq, t in ts.items() if lo <= t < hi}
    out["events_committed"] = len(window)
    out["writer_events_per_s"] = len(window) / seconds
    out["submits_acked"] = wres.acks
    out["submit_errors"] = wres.errors
    out["submits_per_s"] = wres.acks_in_window / seconds
    ack = sorted(wres.ack_ms)
    out["ack_p50_ms"], out["ack_p99_ms"] = pct(ack, 50), pct(ack, 99)
    late = sorted(wres.late_ms)
    out["writer_late_p99_ms"] = pct(late, 99)

    if subscribers:
        lat = array("d")
        delivered = gaps = 0
        for s in subs:
            for t, a, b, c in zip(s.t_ms, s.first, s.last, s.count):
                if c != b - a + 1:
                    gaps += 1
                for seq in range(a, b + 1):
                    e = window.get(seq)
                    if e is not None:
                        lat.append(t - e)
                        delivered += 1
        lat = array("d", sorted(lat))
        expected = len(window) * subscribers
        out["deliveries"] = delivered
        out["deliveries_expected"] = expected
        out["delivered_fraction"] = delivered / expected if expected else float("nan")
        out["dropped_subscribers"] = sum(1 for s in subs if s.dropped)
        out["errored_subscribers"] = sum(1 for s in subs if s.error)
        out["chunk_gaps"] = gaps
        out["delivery_p50_ms"] = pct(lat, 50)
        out["delivery_p90_ms"] = pct(lat, 90)
        out["delivery_p99_ms"] = pct(lat, 99)
        out["delivery_max_ms"] = float(lat[-1]) if lat else float("nan")
        out["frames_per_s_out"] = delivered / seconds
        chunks = sum(len(s.t_ms) for s in subs)
        out["events_per_chunk"] = delivered / chunks if chunks else float("nan")
        out["mbytes_per_s_out"] = sum(s.bytes for s in subs) / seconds / 1e6
    return out


def phase(workroot: Path, name: str, **kw: Any) -> dict[str, Any]:
    workdir = workroot / name
    workdir.mkdir()
    d = start_daemon(workdir)
    try:
        return trio.run(lambda: run_phase(d, **kw))
    finally:
        d.stop()


# --------------------------------------------------------------------------- report


def table(cfg: dict[str, Any], base: dict[str, Any], fan: dict[str, Any], ratio: float) -> list[str]:
    def ok(flag: bool) -> str:
        return "met" if flag else "**missed**"

    n = cfg["subscribers"]
    rows = [
        ("append→delivery p50 / p90 / p99", f"{fan['delivery_p50_ms']:.1f} / {fan['delivery_p90_ms']:.1f} / "
         f"{fan['delivery_p99_ms']:.1f} ms", f"{n} subscribers, every event × subscriber", "", f"p99 < {TARGET_P99_MS:g} ms",
         ok(fan["delivery_p99_ms"] < TARGET_P99_MS)),
        ("append→delivery max", f"{fan['delivery_max_ms']:.1f} ms", "", "", "", ""),
        ("writer: committed events/s", f"{fan['writer_events_per_s']:,.0f} ev/s",
         f"{base['writer_events_per_s']:,.0f} ev/s (no subscribers)", f"{ratio:.3f}",
         f">= {TARGET_THROUGHPUT_RATIO}", ok(ratio >= TARGET_THROUGHPUT_RATIO)),
        ("writer: submit ack p50 / p99", f"{fan['ack_p50_ms']:.1f} / {fan['ack_p99_ms']:.1f} ms",
         f"{base['ack_p50_ms']:.1f} / {base['ack_p99_ms']:.1f} ms", "", "(info)", ""),
        ("writer: submits acked/s (acks inside the window)", f"{fan['submits_per_s']:,.1f}", f"{base['submits_per_s']:,.1f}", "", "(info)", ""),
        ("deliveries (event × subscriber)", f"{fan['deliveries']:,} of {fan['deliveries_expected']:,}",
         f"{fan['delivered_fraction']:.4f}", "", "all", ok(fan["delivered_fraction"] >= 0.9999)),
        ("dropped / failed subscribers", f"{fan['dropped_subscribers']} / {fan['errored_subscribers']}", "", "", "0",
         ok(fan["dropped_subscribers"] == 0 and fan["errored_subscribers"] == 0)),
        ("frames out/s; MB/s; events per read", f"{fan['frames_per_s_out']:,.0f}; {fan['mbytes_per_s_out']:.1f};"
         f" {fan['events_per_chunk']:.1f}", "", "", "(info)", ""),
        ("CPU s, window + drain: daemon / bench", f"{fan['daemon_cpu_s']:.1f} / {fan['bench_cpu_s']:.1f}",
         f"{base['daemon_cpu_s']:.1f} / {base['bench_cpu_s']:.1f}", "", "(info)", ""),
    ]
    head = ["| figure | with subscribers | baseline / note | ratio | target | result |",
            "| --- | --- | --- | --- | --- | --- |"]
    return head + ["| " + " | ".join(r) + " |" for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subscribers", type=int, default=None, help=f"SSE subscribers (default {DEFAULTS['subscribers']})")
    ap.add_argument("--rate", type=float, default=None, help=f"offered logged events/s (default {DEFAULTS['rate']:g})")
    ap.add_argument("--seconds", type=float, default=None, help=f"timed window per phase (default {DEFAULTS['seconds']:g})")
    ap.add_argument("--sessions", type=int, default=None, help=f"writer sessions (default {DEFAULTS['sessions']})")
    ap.add_argument("--quick", action="store_true", help=f"smoke size {QUICK}")
    ap.add_argument("--json", action="store_true", help="(kept for scripts) the last line is always JSON")
    args = ap.parse_args(argv)
    base_cfg = QUICK if args.quick else DEFAULTS
    cfg = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in base_cfg.items()}
    if cfg["subscribers"] < 1 or cfg["rate"] <= 0 or not 0 < cfg["seconds"] <= 600 or cfg["sessions"] < 1:
        ap.error("need --subscribers >= 1, --rate > 0, 0 < --seconds <= 600, --sessions >= 1")

    t_start = time.perf_counter()
    kw = dict(rate=cfg["rate"], seconds=cfg["seconds"], n_sessions=cfg["sessions"])
    with tempfile.TemporaryDirectory(prefix="lens-sse-bench-") as tmp:
        root = Path(tmp)
        base = phase(root, "baseline", subscribers=0, **kw)
        fan = phase(root, "fanout", subscribers=cfg["subscribers"], **kw)
    total = time.perf_counter() - t_start
    ratio = fan["writer_events_per_s"] / base["writer_events_per_s"] if base["writer_events_per_s"] else float("nan")

    print(f"## Lens SSE fan-out — {cfg['subscribers']} subscribers, {cfg['rate']:g} logged events/s offered "
          f"for {cfg['seconds']:g} s, {cfg['sessions']} writer sessions\n")
    print(f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {apsw.sqlite_lib_version()}, "
          f"trio {trio.__version__}; daemon in a subprocess, subscribers + writer in the bench process; "
          f"writer = HTTP POST inputs (faux provider, {EVENTS_PER_SUBMIT} logged events + 1 delta per submit); "
          f"{total:.1f} s\n")
    for line in table(cfg, base, fan, ratio):
        print(line)
    print()
    out: dict[str, Any] = {
        "subscribers": cfg["subscribers"],
        "offered_events_per_s": cfg["rate"],
        "seconds": cfg["seconds"],
        "writer_sessions": cfg["sessions"],
        "writer": "http-post-inputs-faux",
        "delivery_p50_ms": fan["delivery_p50_ms"],
        "delivery_p90_ms": fan["delivery_p90_ms"],
        "delivery_p99_ms": fan["delivery_p99_ms"],
        "delivery_max_ms": fan["delivery_max_ms"],
        "writer_events_per_s": fan["writer_events_per_s"],
        "writer_events_per_s_no_subscribers": base["writer_events_per_s"],
        "writer_throughput_ratio": ratio,
        "ack_p50_ms": fan["ack_p50_ms"],
        "ack_p99_ms": fan["ack_p99_ms"],
        "ack_p50_ms_no_subscribers": base["ack_p50_ms"],
        "ack_p99_ms_no_subscribers": base["ack_p99_ms"],
        "submit_errors": fan["submit_errors"] + base["submit_errors"],
        "deliveries": fan["deliveries"],
        "deliveries_expected": fan["deliveries_expected"],
        "delivered_fraction": fan["delivered_fraction"],
        "dropped_subscribers": fan["dropped_subscribers"],
        "errored_subscribers": fan["errored_subscribers"],
        "events_per_chunk": fan["events_per_chunk"],
        "frames_per_s_out": fan["frames_per_s_out"],
        "daemon_cpu_s": fan["daemon_cpu_s"],
        "daemon_cpu_s_no_subscribers": base["daemon_cpu_s"],
        "bench_cpu_s": fan["bench_cpu_s"],
        "p99_target_met": fan["delivery_p99_ms"] < TARGET_P99_MS,
        "throughput_target_met": ratio >= TARGET_THROUGHPUT_RATIO,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "total_seconds": total,
    }
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
