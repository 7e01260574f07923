"""Fixtures of the daemon suite: the real daemon, in process, on a loopback port 0.

``daemon`` starts :func:`runtime.daemon.serve` with ``await nursery.start(...)`` over a temporary
layout (``<root>/config/lens.jsonc`` optional, ``<root>/config/pair.json``, ``<root>/data``) and
stops it (the ``stop`` event, then waits for ``serve`` to return) after the test.
``daemon_factory(config=...)`` starts one with a config file (small heartbeat, SSE buffer or body
limit) or a second one on the same root (a restart).

Pairing goes through the public route (``POST /pair/requests``) and then either a
:class:`~runtime.pairing.PairStore` on the same file (what the CLI does, in process) or the real
``lens pair approve`` command. Either way the daemon only learns of it by watching the file, so
:meth:`Daemon.pair` waits (bounded) until the daemon accepts the new credential.

Clients: ``httpx2.AsyncClient`` (what the provider SDKs use; it runs under trio) for ordinary
calls and SSE; :func:`raw_http` (a trio socket and hand-written HTTP/1.1) where a test needs the
exact request target or headers an HTTP library would normalise.

``lens serve`` itself, as a process: :class:`ServeProcess`, and :func:`serving`, which starts one
and points the suite's client helpers at it.

Nothing here sleeps for ordering: every wait is a poll of an observable condition with a bounded
deadline (:func:`wait_until`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import apsw
import httpx2
import pytest
import trio

from projections.registry import all_projections
from runtime.api import create_app
from runtime.http_parts import STATUS
from runtime.config import Config, parse_config
from runtime.daemon import ServeOptions, serve
from runtime.pairing import PairStore
from runtime.providers.sdk import sdks_imported

API = "/api/v1"
LIMIT = 30.0  # seconds: the bound on any single wait in this suite (10 s was met by waits that
# passed at a load of 2 and failed at a load of 9 to 13 on two cores: a bound, not a time)
# seconds: the bound on the provider SDKs' import, once a process (2 to 3 s on an idle 2-core
# machine; 11 to 29 s measured at a load of 8 to 10 there): a bound, not a time
SDK_IMPORT_LIMIT = 120.0
BUSY = '/tool sleep_milliseconds {"milliseconds": 600000}'  # holds a session's run until aborted


# --------------------------------------------------------------------------- waiting


async def wait_until(predicate: Callable[[], Awaitable[Any]], timeout: float = LIMIT, what: str = "condition",
                     interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(f"{what} did not hold within {timeout} s")


async def sdks_ready() -> None:
    """Wait (bounded by :data:`SDK_IMPORT_LIMIT`) until the provider SDKs are imported in this
    process. A daemon serving an SDK-backed provider begins importing them once it serves, in a
    worker thread (:class:`runtime.providers.sdk.SdkImport`), and its first request to such a
    provider waits for that import: a test that bounds its session's first turn by :data:`LIMIT`
    waits for that one-off import before it submits, which a loaded host stretches past the
    turn's bound."""
    with trio.fail_after(SDK_IMPORT_LIMIT):
        await sdks_imported()


async def stopped_listening(port: int) -> None:
    """Wait (bounded) until nothing accepts connections on ``port`` of 127.0.0.1: a daemon's stop
    has begun (its HTTP server is closed; the rest of its stop may still be under way)."""
    async def refused() -> bool:
        try:
            await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
        except OSError:
            return True
        return False

    await wait_until(refused, LIMIT, "the daemon to stop listening")


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def finished(events: list[dict[str, Any]], agent: str | None = None) -> list[dict[str, Any]]:
    """The bodies of the ``tool.finished`` events among ``events`` (as the events route gives them);
    with ``agent``, of that agent's calls only."""
    return [e["body"] for e in events if e["kind"] == "tool.finished" and agent in (None, e["agent_id"])]


async def run_tool(d: "Daemon", token: str, sid: str, request_id: str, name: str, args: dict[str, Any],
                   *, agent: str | None = None) -> dict[str, Any]:
    """Have the faux model call ``name`` once; return that call's ``tool.finished`` body. With
    ``agent`` (``"main"`` for a ``subagent`` call, whose subagent's own calls are recorded under its
    id), only that agent's calls are counted."""
    before = len(finished(await d.events(token, sid), agent))
    await d.submit(token, sid, request_id, f"/tool {name} {json.dumps(args)}")
    await d.wait_idle(token, sid)
    bodies = finished(await d.events(token, sid), agent)
    assert len(bodies) == before + 1
    return bodies[-1]


def error_of(resp: httpx2.Response) -> str:
    """The error code of a JSON error response, checking the body's shape on the way."""
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]["code"]


# --------------------------------------------------------------------------- SSE


@dataclass
class SseMessage:
    event: str | None
    data: str
    id: int | None = None
    comment: str | None = None  # a comment-only block (heartbeat, greeting)

    def json(self) -> Any:
        return json.loads(self.data)


def parse_block(block: bytes) -> SseMessage:
    event, data, id_, comments = None, [], None, []
    for line in block.decode().split("\n"):
        if line.startswith(":"):
            comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            id_ = int(value)
    if event is None and not data and id_ is None:
        return SseMessage(None, "", None, comment="\n".join(comments))
    return SseMessage(event, "\n".join(data), id_)


class SseStream:
    """Incremental reader of one SSE response."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""
        self.eof = False
        self.messages: list[SseMessage] = []  # everything read so far, comments included

    async def next(self, timeout: float = LIMIT) -> SseMessage | None:
        """The next message or comment block; ``None`` at the end of the stream."""
        with trio.fail_after(timeout):
            while b"\n\n" not in self._buf:
                if self.eof:
                    assert not self._buf.strip(), f"stream ended inside a message: {self._buf!r}"
                    return None
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    self.eof = True
                    continue
                self._buf += chunk.replace(b"\r\n", b"\n")
        block, _, self._buf = self._buf.partition(b"\n\n")
        msg = parse_block(block)
        self.messages.append(msg)
        return msg

    async def next_event(self, timeout: float = LIMIT) -> SseMessage | None:
        """The next real event (comments skipped); ``None`` at the end of the stream."""
        with trio.fail_after(timeout):
            while True:
                msg = await self.next(timeout=timeout)
                if msg is None or msg.comment is None:
                    return msg

    async def until(self, predicate: Callable[[SseMessage], bool], timeout: float = LIMIT) -> SseMessage:
        """Read until a message satisfies ``predicate``; fail at EOF or after ``timeout``."""
        with trio.fail_after(timeout):
            while True:
                msg = await self.next(timeout=timeout)
                assert msg is not None, "the stream ended first"
                if predicate(msg):
                    return msg

    async def to_end(self, timeout: float = LIMIT) -> list[SseMessage]:
        """Read to the end of the stream; returns the events read by this call (no comments)."""
        out = []
        with trio.fail_after(timeout):
            while (msg := await self.next(timeout=timeout)) is not None:
                if msg.comment is None:
                    out.append(msg)
        return out

    @property
    def seqs(self) -> list[int]:
        return [m.id for m in self.messages if m.id is not None]


# --------------------------------------------------------------------------- raw HTTP


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def code(self) -> str | None:
        try:
            return self.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return None


async def raw_http(port: int, method: str, target: str, headers: dict[str, str] | None = None,
                   body: bytes = b"", *, host: str | None = None) -> RawResponse:
    """One HTTP/1.1 request with the exact ``target`` given (no normalisation), ``Connection: close``.

    A send the server cuts short is no failure by itself: the answer is read as the server sent
    it, as an HTTP client does (httpx reads the answer after a write error). The daemon answers a
    body it refuses by its head (413, 401, 405) before reading it and closes the connection;
    the rest of a body larger than the sockets' buffers then meets a closed socket (EPIPE or a
    reset), and only the answer tells what happened."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host if host is not None else f'127.0.0.1:{port}'}",
             "Connection: close"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                await stream.send_all(raw)
            except trio.BrokenResourceError:
                pass  # (the answer, read below, says why; no answer at all fails in parse_raw_response)
            # hypercorn answers "Connection: close" but may keep the socket open a while: read by framing
            data = await read_answer(stream)
    return parse_raw_response(data)


async def read_answer(stream: trio.SocketStream, *, head_only: bool = False) -> bytes:
    """What the server answers on ``stream``: read until the answer is complete by its framing
    (only its head with ``head_only``; only the head of an event stream), or until the connection
    ends or is reset (what was read before stands)."""
    data = b""
    while not (b"\r\n\r\n" in data if head_only else _complete(data)):
        if b"\r\n\r\n" in data and b"text/event-stream" in data.partition(b"\r\n\r\n")[0]:
            break
        try:
            chunk = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            break
        if not chunk:
            break
        data += chunk
    return data


def parse_raw_response(data: bytes) -> RawResponse:
    """An HTTP/1.1 answer read off the socket: status, headers, the body (de-chunked, unless it is
    an event stream, which is returned as read)."""
    assert data, "no answer: the connection was closed or reset before a byte of one came"
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    hdrs = _headers(header_lines)
    if hdrs.get("transfer-encoding", "").lower() == "chunked" and "event-stream" not in hdrs.get("content-type", ""):
        out = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        rest = out
    return RawResponse(int(status_line.split()[1]), hdrs, rest)


ERROR_CODE_RE = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
MAX_ERROR_MESSAGE = 600  # characters: a message names the problem; it does not echo a client's long value whole
LEAK_MARKERS = ("Traceback", 'File "', " object at 0x", "<class ", "msgspec.", "quart.", "werkzeug.")


def assert_error_shape(r: RawResponse, where: str) -> tuple[str, str]:
    """``r`` (a 4xx/5xx) is the API's error shape: JSON ``{"error": {"code", "message"}}``, a stable
    UPPER_SNAKE code whose status in the table is ``r.status``, a short message that leaks no
    internals. Returns ``(code, message)``."""
    assert r.headers.get("content-type", "").startswith("application/json"), where
    body = json.loads(r.body)
    assert isinstance(body, dict) and set(body) == {"error"}, where
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message"}, where
    code, message = error["code"], error["message"]
    assert isinstance(code, str) and ERROR_CODE_RE.fullmatch(code), where
    assert isinstance(message, str) and message.strip(), where
    assert len(message) <= MAX_ERROR_MESSAGE, f"a message of {len(message)} characters: {where}"
    expected = STATUS.get(code, {"NOT_FOUND": 404, "METHOD_NOT_ALLOWED": 405, "BODY_TOO_LARGE": 413}.get(code))
    assert expected == r.status, f"{code} is {expected} in the table: {where}"
    for marker in LEAK_MARKERS:
        assert marker not in message, where
    return code, message


def lock_is_free(data_dir: Path) -> bool:
    """Whether the data directory's lock can be taken: no process holds it (a daemon that
    stopped, or a child of its that inherited the descriptor and outlived it)."""
    fd = os.open(data_dir / "lock", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextmanager
def holding_projections(data_dir: Path) -> Iterator[None]:
    """``projections.db`` held in a write transaction by another process's connection (as a
    `lens log rebuild` beside the daemon holds it): the projector's next write waits for it."""
    holder = apsw.Connection(str(data_dir / "projections.db"))
    holder.setbusytimeout(int(LIMIT * 1000))  # the projector may be mid-write: wait for it, then hold
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
    finally:
        if not holder.getautocommit():
            holder.execute("ROLLBACK")
        holder.close()


def projection_dump(data_dir: Path) -> dict[str, Any]:
    """The rows of every projection in ``data_dir``'s projections.db, and their positions (to compare
    what a daemon kept up to date with what `lens log rebuild` makes)."""
    conn = apsw.Connection(str(data_dir / "projections.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out: dict[str, Any] = {p.name: p.dump(conn) for p in all_projections()}
        out["positions"] = sorted(conn.execute("SELECT * FROM positions"))
        return out
    finally:
        conn.close()


def _headers(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        k, _, v = line.partition(":")
        out[k.strip().lower()] = v.strip()
    return out


def _complete(data: bytes) -> bool:
    if b"\r\n\r\n" not in data:
        return False
    head, _, rest = data.partition(b"\r\n\r\n")
    hdrs = _headers(head.decode("latin-1").split("\r\n")[1:])
    if "content-length" in hdrs:
        return len(rest) >= int(hdrs["content-length"])
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        return rest.endswith(b"0\r\n\r\n")
    return False


# --------------------------------------------------------------------------- the CLI


def lens_command() -> list[str]:
    """The ``lens`` script installed next to this interpreter (the real CLI of the code under
    test); ``python -m runtime.cli`` without one. Never a ``lens`` found on PATH: that may be
    another checkout's."""
    script = Path(sys.executable).parent / "lens"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli"]


async def run_lens(cwd: Path, *args: str, check: bool = True) -> Any:
    """Run ``lens ARGS`` in ``cwd``; returns the completed process (stdout/stderr as text)."""
    with trio.fail_after(60):
        proc = await trio.run_process([*lens_command(), *args], cwd=cwd, capture_stdout=True, capture_stderr=True,
                                      check=False)
    out = SimpleNamespace(returncode=proc.returncode, stdout=proc.stdout.decode(), stderr=proc.stderr.decode())
    if check:
        assert proc.returncode == 0, (args, out.stdout, out.stderr)
    return out


# --------------------------------------------------------------------------- the daemon


@dataclass
class Daemon:
    root: Path
    config_path: Path
    pair_path: Path
    data_dir: Path
    url: str
    port: int
    client: httpx2.AsyncClient
    stop: trio.Event
    done: trio.Event
    lines: list[str] = field(default_factory=list)

    @property
    def config_dir(self) -> Path:
        return self.config_path.parent

    def pairs(self) -> PairStore:
        """A separate handle on the pair file, as the CLI would open it."""
        return PairStore(self.pair_path)

    async def request(self, method: str, path: str, token: str | None = None, *, json_body: Any = None,
                      headers: dict[str, str] | None = None, **kw: Any) -> httpx2.Response:
        h = {**auth(token), **(headers or {})}
        if json_body is not None:
            kw["content"] = json.dumps(json_body).encode()
            h.setdefault("Content-Type", "application/json")
        return await self.client.request(method, API + path, headers=h, **kw)

    async def get(self, path: str, token: str | None = None, **kw: Any) -> httpx2.Response:
        return await self.request("GET", path, token, **kw)

    async def post(self, path: str, token: str | None = None, body: Any = None, **kw: Any) -> httpx2.Response:
        return await self.request("POST", path, token, json_body={} if body is None else body, **kw)

    async def put(self, path: str, token: str | None = None, body: Any = None, **kw: Any) -> httpx2.Response:
        return await self.request("PUT", path, token, json_body=body, **kw)

    # ------------------------------------------------------------------ pairing

    async def register(self, client_id: str, name: str = "test client") -> None:
        r = await self.post("/pair/requests", body={"clientId": client_id, "name": name})
        assert r.status_code == 202, r.text
        assert r.json()["clientId"] == client_id

    async def pair(self, client_id: str, strong: bool = False, via: str = "store") -> str:
        """Register ``client_id``, approve it (PairStore or the real CLI), wait until the daemon accepts it."""
        await self.register(client_id)
        if via == "cli":
            args = ["pair", "approve", "--client", client_id] + (["--strong-trust"] if strong else [])
            token = (await run_lens(self.root, *args)).stdout.strip().splitlines()[-1]
        else:
            token = await trio.to_thread.run_sync(lambda: self.pairs().approve(client_id, strong=strong))
        await self.wait_accepted(token)
        return token

    async def status_of(self, token: str | None) -> int:
        return (await self.get("/projects", token)).status_code

    # (a bound, not a wait: each returns at the first answer that says so. Where the spec's "within
    # a second" is what is tested, the test passes its own timeout; the default is generous, for a
    # machine loaded by the rest of the suite.)
    async def wait_accepted(self, token: str, timeout: float = LIMIT) -> None:
        await wait_until(lambda: self._is(token, 200), timeout, "the daemon accepting a new credential")

    async def wait_refused(self, token: str, timeout: float = LIMIT) -> None:
        await wait_until(lambda: self._is(token, 401), timeout, "the daemon refusing a credential")

    async def _is(self, token: str, status: int) -> bool:
        return await self.status_of(token) == status

    # ------------------------------------------------------------------ projects and sessions

    async def project(self, token: str, name: str = "p") -> dict[str, Any]:
        ws = self.root / "workspaces" / name
        ws.mkdir(parents=True, exist_ok=True)
        r = await self.post("/projects", token, {"name": name, "workspace": str(ws)})
        assert r.status_code == 201, r.text
        return r.json()

    async def session(self, token: str, project_id: str) -> dict[str, Any]:
        r = await self.post("/sessions", token, {"projectId": project_id})
        assert r.status_code == 201, r.text
        return r.json()

    async def new_session(self, token: str) -> str:
        """The id of a new session, in a new project."""
        return (await self.session(token, (await self.project(token))["id"]))["id"]

    async def submit(self, token: str, sid: str, request_id: str, content: Any, **kw: Any) -> dict[str, Any]:
        r = await self.post(f"/sessions/{sid}/inputs", token, {"requestId": request_id, "content": content, **kw})
        assert r.status_code == 202, r.text
        return r.json()

    async def view(self, token: str, sid: str) -> dict[str, Any]:
        r = await self.get(f"/sessions/{sid}", token)
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_idle(self, token: str, sid: str, timeout: float = LIMIT) -> dict[str, Any]:
        async def idle() -> dict[str, Any] | None:
            v = await self.view(token, sid)
            return v if v["status"] == "idle" and not v["queued"] else None

        return await wait_until(idle, timeout, f"session {sid} idle")

    async def wait_running_call(self, token: str, sid: str) -> dict[str, Any]:
        """Wait until the session's run is inside a tool call (a :data:`BUSY` input)."""
        async def running() -> dict[str, Any] | None:
            v = await self.view(token, sid)
            busy = v["status"] == "running" and any(
                it.get("call", {}).get("status") == "running" for it in v["items"])
            return v if busy else None

        return await wait_until(running, LIMIT, f"session {sid} inside a tool call")

    async def events(self, token: str, sid: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            r = await self.get(f"/sessions/{sid}/events", token, params={"after": after, "limit": 1000})
            assert r.status_code == 200, r.text
            page = r.json()
            out.extend(page["events"])
            if not page["events"]:
                return out
            after = page["nextAfter"]

    # ------------------------------------------------------------------ SSE

    @asynccontextmanager
    async def sse(self, token: str | None, *, params: dict[str, str] | None = None,
                  last_event_id: int | None = None) -> AsyncIterator[SseStream]:
        headers = auth(token)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        async with self.client.stream("GET", API + "/events/stream", params=params, headers=headers,
                                      timeout=httpx2.Timeout(LIMIT, read=None)) as resp:
            assert resp.status_code == 200, (await resp.aread()).decode()
            assert resp.headers["content-type"].startswith("text/event-stream")
            yield SseStream(resp.aiter_raw())


async def slow_stream_request(port: int, token: str, query: str, *, http: str = "1.1",
                              last_event_id: int | None = None) -> trio.socket.SocketType:
    """A socket with a 4 KiB receive buffer that has asked for the stream and read nothing yet."""
    slow = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    slow.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
    await slow.connect(("127.0.0.1", port))
    resume = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
    await slow.send(f"GET {API}/events/stream?{query} HTTP/{http}\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Authorization: Bearer {token}\r\n{resume}\r\n".encode())
    return slow


# --------------------------------------------------------------------------- `lens serve` as a process


class ServeProcess:
    def __init__(self, cwd: Path, *extra: str, stderr_name: str = "serve-0.err",
                 env: dict[str, str] | None = None, default_data: bool = False) -> None:
        self.cwd = cwd
        self.extra = extra  # more `lens serve` arguments (a `--data` of its own replaces "data")
        self.default_data = default_data  # True: no `--data` at all (the default, `.lens` in cwd)
        self.stderr_name = stderr_name  # in cwd: several processes in one test keep theirs apart
        self.env = env  # the process's whole environment (None: this one's)
        self.lines: list[str] = []
        self.listening = trio.Event()
        self.stdout_closed = trio.Event()
        self.proc: trio.Process | None = None

    async def run(self, nursery: trio.Nursery) -> str:
        """Start ``lens serve``; returns the URL it prints once it listens."""
        self.stderr = open(self.cwd / self.stderr_name, "wb")
        self.proc = await trio.lowlevel.open_process(
            [*lens_command(), "serve", "--port", "0",
             *(() if "--data" in self.extra or self.default_data else ("--data", "data")), *self.extra], cwd=self.cwd,
            stdout=subprocess.PIPE, stderr=self.stderr, env=self.env)
        nursery.start_soon(self._read)
        with trio.fail_after(30):
            async with trio.open_nursery() as race:  # listening, or ended without (a refused start)
                async def until(ev: trio.Event) -> None:
                    await ev.wait()
                    race.cancel_scope.cancel()
                race.start_soon(until, self.listening)
                race.start_soon(until, self.stdout_closed)
        if not self.listening.is_set():
            err = (self.cwd / self.stderr_name).read_text(errors="replace")
            raise AssertionError(f"lens serve ended before it listened: {self.lines}\n{err}")
        url = next(m.group(1) for line in self.lines if (m := re.match(r"lens: listening on (http://\S+)$", line)))
        return url

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                self.lines.append(line.decode())
                if line.startswith(b"lens: listening on "):
                    self.listening.set()
        self.stdout_closed.set()

    async def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(8):
            code = await self.proc.wait()
            await self.stdout_closed.wait()
        self.stderr.close()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


@asynccontextmanager
async def served_once(serve: ServeProcess) -> AsyncIterator[str]:
    """``serve`` started and listening, its URL given to the block; when the block ends, the
    process is stopped with SIGTERM and must exit 0 (its stopped line read, its stderr closed).
    It is killed if it did not start, the block failed, or it did not stop."""
    async with trio.open_nursery() as nursery:
        try:
            url = await serve.run(nursery)
            yield url
            code = await serve.terminate()
            assert code == 0, (code, (serve.cwd / serve.stderr_name).read_text(errors="replace")[-3000:])
        finally:
            serve.kill()


def as_daemon(cwd: Path, url: str, client: httpx2.AsyncClient) -> Daemon:
    """The suite's client helpers, pointed at the process (stop/done are unused here)."""
    port = int(url.rsplit(":", 1)[1])
    return Daemon(cwd, cwd / "config" / "lens.jsonc", cwd / "config" / "pair.json", cwd / "data", url, port, client,
                  trio.Event(), trio.Event())


@asynccontextmanager
async def serving(cwd: Path, *extra: str, stderr_name: str = "serve-0.err",
                  timeout: float = LIMIT) -> AsyncIterator[tuple[ServeProcess, Daemon]]:
    """``lens serve`` started in ``cwd`` (``extra``: more arguments) and the suite's client helpers
    pointed at it, their requests bounded by ``timeout`` seconds. The process is killed when the
    block ends, unless the block ended it first (``serve.terminate()``, a signal)."""
    process = ServeProcess(cwd, *extra, stderr_name=stderr_name)
    async with trio.open_nursery() as nursery:
        try:
            url = await process.run(nursery)
            async with httpx2.AsyncClient(base_url=url, timeout=timeout) as client:
                yield process, as_daemon(cwd, url, client)
        finally:
            process.kill()
            if process.proc is not None:
                with trio.move_on_after(10) as reaped:  # (reaped: no "still running" at collection)
                    reaped.shield = True
                    await process.proc.wait()
                process.stderr.close()


async def projections_caught_up(d: Daemon) -> None:
    """Wait (bounded) until the daemon's projections have folded its whole log."""
    last_seq = (await d.get("/health")).json()["lastSeq"]

    async def caught_up() -> bool:
        return all(seq == last_seq for _, _, seq in projection_dump(d.data_dir)["positions"])

    await wait_until(caught_up, what="the projections catching up")


def app_routes() -> list[tuple[str, str]]:
    """(method, rule) of every route the API registers, read from the app's own URL map.

    The app is built only to read its route table; its handlers are never called here.
    """
    app = create_app(SimpleNamespace(config=Config()))  # type: ignore[arg-type]
    out = []
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, rule.rule))
    return sorted(out)


DaemonFactory = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def daemon_factory(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[DaemonFactory]:
    """``await daemon_factory(config=..., root=..., model=...)``: a running daemon (``model``: as
    ``lens serve --model``; ``write_stall_seconds``: the daemon's bound on an SSE client that stops
    reading, 30 s unless given); all are stopped after the test.

    ``config`` (dict or JSONC text) is written to ``<root>/config/lens.jsonc``; without it no config
    file exists and the daemon runs on built-in defaults.
    """
    running: list[Daemon] = []

    async def start(config: dict[str, Any] | str | None = None, root: Path | None = None,
                    model: str | None = None, write_stall_seconds: float | None = None) -> Daemon:
        root = root or tmp_path
        config_path = root / "config" / "lens.jsonc"
        config_path.parent.mkdir(parents=True, exist_ok=True)
        notes: tuple[str, ...] = ()
        if config is not None:
            text = config if isinstance(config, str) else json.dumps(config, indent=2)
            config_path.write_text(text)
        if config_path.exists():
            cfg = parse_config(config_path.read_bytes(), str(config_path))
        else:
            cfg, notes = Config(), (f"no config file at {config_path}; using built-in defaults",)
        data_dir = root / "data"
        stop, done, lines = trio.Event(), trio.Event(), []

        async def run(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                opts = ServeOptions(cfg, config_path, data_dir, "127.0.0.1", 0, model=model, notes=notes)
                if write_stall_seconds is not None:
                    opts.write_stall_seconds = write_stall_seconds
                await serve(opts, task_status=task_status, stop=stop, announce=lines.append)
            finally:
                done.set()

        urls = await nursery.start(run)
        url = urls[0]
        port = int(url.rsplit(":", 1)[1])
        client = httpx2.AsyncClient(base_url=url, timeout=LIMIT)
        d = Daemon(root, config_path, root / "config" / "pair.json", data_dir, url, port, client, stop, done, lines)
        running.append(d)
        return d

    yield start
    for d in reversed(running):
        await d.client.aclose()
        d.stop.set()
        with trio.fail_after(LIMIT):
            await d.done.wait()


@pytest.fixture
async def daemon(daemon_factory: DaemonFactory) -> Daemon:
    """A daemon on built-in defaults (no config file)."""
    return await daemon_factory()


@pytest.fixture
async def strong(daemon: Daemon) -> str:
    """A strong-trust credential for ``daemon``."""
    return await daemon.pair("strong-client", strong=True)


@pytest.fixture
async def reader(daemon: Daemon) -> str:
    """A read-only credential for ``daemon``."""
    return await daemon.pair("read-client", strong=False)


async def awaiting_an_answer(d: Daemon, token: str, text: str) -> tuple[str, dict[str, Any]]:
    """A new session in a new project, sent ``text`` as input ``r1``, which its faux script answers
    with a question: the session's id, and its view once it awaits the answer."""
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", text)

    async def awaiting() -> dict[str, Any] | None:
        view = await d.view(token, sid)
        return view if view["status"] == "awaiting_answer" else None

    return sid, await wait_until(awaiting, what="awaiting_answer")


async def question_opened(d: Daemon, token: str, sid: str, rid: str, text: str) -> str:
    """Submit ``text`` as input ``rid`` of session ``sid`` (a faux script's cue to ask, or a
    ``/tool ask_user`` command): the id of the question it opens, once the session awaits its
    answer."""
    await d.submit(token, sid, rid, text)

    async def awaiting() -> str | None:
        v = await d.view(token, sid)
        return v["questions"][0]["questionId"] if v["status"] == "awaiting_answer" and v.get("questions") else None

    return await wait_until(awaiting, what="an open question")


async def race(*sends: Callable[[], Awaitable[httpx2.Response]]) -> list[httpx2.Response]:
    """The replies to ``sends`` (each a request not yet sent), in the order given: each runs in
    a task of its own, and one event lets them all go at once."""
    replies: list[httpx2.Response | None] = [None] * len(sends)
    go = trio.Event()

    async def send(i: int) -> None:
        await go.wait()
        replies[i] = await sends[i]()

    async with trio.open_nursery() as nursery:
        for i in range(len(sends)):
            nursery.start_soon(send, i)
        go.set()
    return [r for r in replies if r is not None]


async def stop_daemon(d: Daemon) -> None:
    """Stop ``d`` now (the fixture's teardown then finds it stopped)."""
    await d.client.aclose()
    d.stop.set()
    with trio.fail_after(LIMIT):
        await d.done.wait()


def file_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def write_pair_file(path: Path, *client_ids: str) -> None:
    """A pair file at ``path`` (mode 0600, its directory made) with a pending record of each of
    ``client_ids``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clients = ", ".join(f'{{"clientId": "{c}", "status": "pending"}}' for c in client_ids)
    path.write_text(f'{{"version": 1, "clients": [{clients}]}}')
    path.chmod(0o600)
