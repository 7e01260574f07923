"""One MCP server over stdio: a child process speaking newline-delimited JSON-RPC 2.0.

:func:`open_connection` starts the process (its own process group, so a server that starts
children of its own leaves none behind), runs the ``initialize`` handshake within a deadline and
yields a :class:`Connection`. Leaving the context stops the server the way the MCP stdio
transport asks: close its stdin, then SIGTERM to the group, then SIGKILL after a grace period.

Requests wait for their response; a request cancelled by its caller (a session's abort, a call
timeout) sends ``notifications/cancelled`` for it. A server that exits, closes its stdout or
writes something that is not JSON-RPC fails every request in flight with
:class:`ServerUnavailable` and ends the connection (:attr:`Connection.closed`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import msgspec
import trio

from events.secrets import Secrets
from runtime.stop_now import StopNow  # (imports nothing of the daemon: no cycle)
from tools.json_values import json_kind, lone_surrogate

from .escaped import Escaped

# Newest first: the version asked for, then the older ones a server may answer with.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
CLIENT_INFO = {"name": "lens", "version": "0.1.0"}
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one JSON-RPC line; a longer one ends the connection
STDERR_TAIL_BYTES = 4096
# Answers to a server's own requests (ping) waiting to be written: a server that floods them while
# it reads nothing has the rest dropped (each is a line it wrote; a pipe's worth is already on
# its way), and the reader goes on reading the results of calls.
MAX_ANSWERS_QUEUED = 64
MAX_OUT_QUEUED = 64  # lines for the server's stdin queued behind the one being written
REAPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reaper.py")
STDIN_CLOSE_GRACE = 1.0  # seconds: after stdin closes, before SIGTERM
TERM_GRACE = 2.0  # seconds: after SIGTERM, before SIGKILL


class McpError(Exception):
    """A failure with a stable code (``MCP_…``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ServerUnavailable(McpError):
    def __init__(self, message: str) -> None:
        super().__init__("MCP_SERVER_UNAVAILABLE", message)


class RequestFailed(McpError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, rpc_code: Any, message: str, data: Any = None, secrets: Secrets | None = None) -> None:
        # (the server's code, cut after the daemon's keys are replaced in it: ``Secrets.cut``)
        text = f"{message} (JSON-RPC error {(secrets or Secrets()).cut(str(rpc_code), 40, '…')})"
        # (made valid Unicode: a lone surrogate from a \ud800 escape could not be recorded or sent)
        super().__init__("MCP_REQUEST_FAILED", text.encode("utf-8", "replace").decode("utf-8"))
        self.rpc_code = rpc_code
        self.data = data


@dataclass
class _Pending:
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: McpError | None = None


class StderrTail:
    """The last :data:`STDERR_TAIL_BYTES` a server wrote to stderr (reported, never logged)."""

    def __init__(self, secrets: Secrets | None = None) -> None:
        self._buf = b""
        self._cut = False  # bytes were dropped before the tail's start
        self._secrets = secrets or Secrets()

    def add(self, chunk: bytes) -> None:
        self._buf += chunk
        if len(self._buf) > STDERR_TAIL_BYTES:
            self._buf, self._cut = self._buf[-STDERR_TAIL_BYTES:], True

    def text(self) -> str:
        """The tail, scrubbed of the keys the daemon knows; a tail that begins inside a key
        leaves out the key's end (which no scrub recognises)."""
        return self._secrets.mend(self._buf.decode("utf-8", "replace"), cut_start=self._cut)


class Connection:
    """An initialized session with one server. Built by :func:`open_connection` only."""

    def __init__(self, proc: trio.Process, nursery: trio.Nursery, stderr: StderrTail,
                 on_notification: Callable[[str, Any], None], secrets: Secrets | None = None) -> None:
        self.proc = proc
        self.secrets = secrets or Secrets()  # (a line quoted in an error is scrubbed before its cut)
        self.stderr = stderr
        self.closed = trio.Event()
        self.close_reason = ""
        self.protocol_version = ""
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self._nursery = nursery
        self._on_notification = on_notification
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        # Every line for the server's stdin, written whole by _write_out: a caller cancelled while
        # its request was being written (an abort, a call's timeout) left half a line on the
        # pipe, the next message joined to it, and the server read neither.
        self._out, self._out_queue = trio.open_memory_channel[bytes](MAX_OUT_QUEUED)
        # Answers to the server's own requests (ping), written by _write_answers: the reader never
        # waits on the server's stdin (see MAX_ANSWERS_QUEUED).
        self._answers, self._answers_out = trio.open_memory_channel[dict[str, Any]](MAX_ANSWERS_QUEUED)
        self.answers_dropped = 0

    # ------------------------------------------------------------------ requests

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The ``result`` of one request. Raises :class:`RequestFailed` for a JSON-RPC error and
        :class:`ServerUnavailable` when the connection ends first. Cancelling the caller sends
        ``notifications/cancelled`` for the request (best effort, bounded)."""
        if self.closed.is_set():
            raise ServerUnavailable(self.close_reason)
        self._next_id += 1
        rid = self._next_id
        pending = self._pending[rid] = _Pending()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(message)
            await pending.done.wait()
        except trio.Cancelled:
            if not pending.done.is_set() and not self.closed.is_set():
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    try:
                        await self.notify("notifications/cancelled",
                                          {"requestId": rid, "reason": "cancelled by the client"})
                    except McpError:
                        pass  # (the server is going away: the cancellation stands, not its error)
            raise
        finally:
            self._pending.pop(rid, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def _send(self, message: dict[str, Any]) -> None:
        """Queue one line for the server (waiting while :data:`MAX_OUT_QUEUED` are queued). A
        caller cancelled here has queued all of it or nothing; once queued it is written whole."""
        data = msgspec.json.encode(message) + b"\n"  # (JSON text never holds a raw newline)
        if self.closed.is_set():
            raise ServerUnavailable(self.close_reason)
        try:
            await self._out.send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ServerUnavailable(self.close_reason) from None

    async def _write_out(self) -> None:
        """Write the queued lines, each whole, until the connection ends; a stdin the server
        closed ends the connection (failing the requests in flight)."""
        assert self.proc.stdin is not None
        async with self._out_queue:
            async for data in self._out_queue:
                try:
                    await self.proc.stdin.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._close("the server closed its stdin")
                    return

    # ------------------------------------------------------------------ reading

    def _close(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        self._out.close()  # (_send raises from now on)
        for p in self._pending.values():
            if not p.done.is_set():
                p.error = ServerUnavailable(reason)
                p.done.set()

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buf = bytearray()
        scanned = 0  # (buf[:scanned] holds no newline: a long message is not searched again per chunk)
        try:
            while True:
                chunk = await self.proc.stdout.receive_some(65536)
                if not chunk:
                    break
                buf += chunk
                while (nl := buf.find(b"\n", scanned)) >= 0:
                    if nl > MAX_MESSAGE_BYTES:  # (its end came in the read that brought its newline)
                        break
                    line = bytes(buf[:nl])
                    del buf[:nl + 1]
                    scanned = 0
                    if line.strip():
                        await self._dispatch(line)
                else:
                    scanned = len(buf)
                if nl > MAX_MESSAGE_BYTES or len(buf) > MAX_MESSAGE_BYTES:
                    self._close(f"the server wrote a message larger than {MAX_MESSAGE_BYTES} bytes")
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except _ProtocolViolation as exc:
            self._close(str(exc))
            return
        # (a server that closed its stdout is gone for us even if its process lingers)
        code = None
        with trio.move_on_after(STDIN_CLOSE_GRACE):
            code = await self.proc.wait()
        self._close("the server closed its stdout" if code is None else _exit_reason(code))

    async def _watch_exit(self) -> None:
        """End the connection when the server exits, also while a child it started holds its
        stdout open (the end of stdout would never come, and requests would wait for nothing)."""
        code = await self.proc.wait()
        with trio.move_on_after(STDIN_CLOSE_GRACE):  # (what it wrote before exiting is still read)
            await self.closed.wait()
        self._close(_exit_reason(code))

    async def _dispatch(self, line: bytes) -> None:
        try:
            # (a large result is decoded and parsed off the event loop)
            msg = _parse(line) if len(line) < 1024 * 1024 else await trio.to_thread.run_sync(_parse, line)
        except UnicodeDecodeError as exc:
            # (MCP's stdio messages are UTF-8, decoded strictly before the JSON is read: given bytes,
            # the parser guessed the encoding, a BOM or a leading NUL making it another, and let
            # UTF-8-encoded surrogates through. The refusal names the first bad byte and its offset)
            raise _ProtocolViolation(
                f"the server wrote a line that is not UTF-8 on stdout (byte 0x{line[exc.start]:02x} at offset "
                f"{exc.start}; MCP messages are UTF-8): {self.secrets.cut(line, 200)!r}") from None
        except ValueError:
            raise _ProtocolViolation(f"the server wrote a line that is not JSON on stdout: {self.secrets.cut(line, 200)!r}") from None
        except RecursionError:
            raise _ProtocolViolation(f"the server wrote JSON nested too deep to read on stdout: {self.secrets.cut(line, 200)!r}") from None
        # A batch (JSON-RPC 2.0's array of messages, which MCP 2025-03-26 has clients receive) is
        # its messages in order; an empty one, or one holding something else, is no JSON-RPC.
        batch = msg if isinstance(msg, list) and msg else [msg]
        if not all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in batch):
            raise _ProtocolViolation(f"the server wrote something that is not JSON-RPC 2.0: {self.secrets.cut(line, 200)!r}")
        for i, m in enumerate(batch):
            if i % 1000 == 999:  # (a batch of a million pings is answered without holding the loop)
                await trio.lowlevel.checkpoint()
            await self._dispatch_message(m)

    async def _dispatch_message(self, msg: dict[str, Any]) -> None:
        """One JSON-RPC 2.0 message of the server's: a request it makes, a notification, or the
        answer to a request of ours."""
        method = msg.get("method")
        if isinstance(method, str):
            if "id" in msg:  # a request from the server: answer the ones a client must
                rid = msg["id"]
                # (MCP ids are strings or integers. Another one is refused with the id null, as
                # JSON-RPC says of an invalid request: a lone surrogate, which a JSON escape can
                # write, made the echoed id unencodable and ended the reader, calls in flight waiting)
                if not ((type(rid) is str and lone_surrogate(rid) is None) or type(rid) is int):
                    await self._reply(None, error={"code": -32600, "message":
                                                   "Invalid Request: a request id is a string or an integer"})
                elif method == "ping":
                    await self._reply(msg["id"], result={})
                else:
                    await self._reply(msg["id"], error={"code": -32601, "message": f"method {method!r} is not supported"})
            else:
                self._on_notification(method, msg.get("params"))
            return
        rid = msg.get("id")
        # (our ids are integers: `true` or `1.0` equals 1 in Python, yet answers no request of ours)
        pending = self._pending.get(rid) if type(rid) is int else None
        if pending is None or pending.done.is_set():
            return  # an answer to a request given up on (cancelled, timed out)
        err = msg.get("error")
        if err is not None:
            err = err if isinstance(err, dict) else {}
            pending.error = RequestFailed(err.get("code"), self.secrets.cut(str(err.get("message") or "no message"), 2000),
                                          err.get("data"), self.secrets)
        else:
            pending.result = msg.get("result")
        pending.done.set()

    async def _reply(self, rid: Any, **body: Any) -> None:
        """Queue the answer to a request of the server's; past :data:`MAX_ANSWERS_QUEUED` waiting
        to be written it is dropped (counted in ``answers_dropped``)."""
        try:
            self._answers.send_nowait({"jsonrpc": "2.0", "id": rid, **body})
        except trio.WouldBlock:
            self.answers_dropped += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _write_answers(self) -> None:
        async for answer in self._answers_out:
            try:
                await self._send(answer)
            except ServerUnavailable:
                return

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            while chunk := await self.proc.stderr.receive_some(65536):
                self.stderr.add(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class _ProtocolViolation(Exception):
    pass


def _parse(line: bytes) -> Any:
    """One line of the server's as JSON, decoded as strict UTF-8 first (raises
    :class:`UnicodeDecodeError`, whose ``start`` is the offset of the first bad byte)."""
    return json.loads(line.decode("utf-8"))


def _exit_reason(code: int) -> str:
    return f"the server exited with status {code}" if code >= 0 else f"the server was killed by signal {-code}"


@dataclass(frozen=True)
class Launch:
    """How to start one server: argv, its whole environment, working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None


@asynccontextmanager
async def open_connection(launch: Launch, *, startup_timeout: float,
                          on_notification: Callable[[str, Any], None] = lambda method, params: None,
                          stderr: StderrTail | None = None, secrets: Secrets | None = None,
                          stop_now: StopNow | None = None) -> AsyncIterator[Connection]:
    """Start the server and initialize it. Raises :class:`McpError` (``MCP_START_FAILED``) when it
    cannot be started, exits, or does not finish ``initialize`` within ``startup_timeout`` s.
    ``stop_now``: its stop's graces end at once once set (see :func:`stop_process`)."""
    stderr = stderr if stderr is not None else StderrTail(secrets)
    # The server is started by a small parent of its own (:mod:`tools.reaper`) that adopts what its
    # tree orphans, and tells on a pipe whether the server could be started.
    status_read, status_write = os.pipe()
    try:
        try:
            proc = await trio.lowlevel.open_process(
                # (this process's pid, the one the reaper watches: read by the reaper itself, it
                # would be init's once this process were killed before the reaper got there)
                [sys.executable, "-I", "-S", REAPER, str(status_write), "1" if "LC_CTYPE" in launch.env else "0",
                 f"same:{os.getpid()}", *launch.argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=launch.env, cwd=launch.cwd, start_new_session=True, pass_fds=(status_write,))
        finally:
            os.close(status_write)
    except BaseException as exc:
        # (also when cancelled at open_process's first checkpoint, or a defect: the status pipe's
        # other end is ours to close whatever failed; only an OSError is the server's failure)
        os.close(status_read)
        if not isinstance(exc, OSError):
            raise
        # (a cwd that cannot be entered fails the same way as a missing command: say which it was)
        where = f" (working directory {launch.cwd!r})" if launch.cwd is not None and exc.filename == launch.cwd else ""
        raise McpError("MCP_START_FAILED", f"cannot start {launch.argv[0]!r}{where}: {exc.strerror or exc}") from None
    try:
        errno = await _start_status(status_read, startup_timeout)
    except BaseException:
        with trio.CancelScope(shield=True):
            await stop_process(proc, stop_now)
        raise
    if errno is not None:
        with trio.CancelScope(shield=True):
            await stop_process(proc, stop_now)
        command = launch.argv[0]
        # (a relative path is looked for from the server's working directory, not the daemon's)
        where = (f" (a relative path, from the working directory {launch.cwd or os.getcwd()!r})"
                 if "/" in command and not os.path.isabs(command) else "")
        raise McpError("MCP_START_FAILED", f"cannot start {command!r}{where}: {os.strerror(errno)}")
    try:
        async with trio.open_nursery() as nursery:
            conn = Connection(proc, nursery, stderr, on_notification, secrets)
            nursery.start_soon(conn._read_stdout)
            nursery.start_soon(conn._read_stderr)
            nursery.start_soon(conn._write_answers)
            nursery.start_soon(conn._write_out)
            nursery.start_soon(conn._watch_exit)
            try:
                await _initialize(conn, startup_timeout)
                yield conn
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stop_process(proc, stop_now)


async def _start_status(fd: int, timeout: float) -> int | None:
    """What the reaper writes on its status pipe (and closes ``fd``): ``None`` once the server runs,
    else the errno of why it could not be started."""
    said = b""
    async with trio.lowlevel.FdStream(fd) as stream:
        with trio.move_on_after(timeout):  # (then the handshake's own deadline says so)
            while chunk := await stream.receive_some(64):
                said += chunk
    try:
        return int(said) if said.strip() else None
    except ValueError:
        return None


async def _initialize(conn: Connection, timeout: float) -> None:
    params = {"protocolVersion": PROTOCOL_VERSIONS[0], "capabilities": {}, "clientInfo": CLIENT_INFO}
    try:
        with trio.fail_after(timeout):
            result = await conn.request("initialize", params)
    except trio.TooSlowError:
        raise McpError("MCP_START_FAILED", f"the server did not answer initialize within {timeout:g} s") from None
    except McpError as exc:
        raise McpError("MCP_START_FAILED", f"initialize failed: {exc.message}") from None
    if not isinstance(result, dict):
        raise McpError("MCP_START_FAILED", "initialize answered something that is not an object")
    version = result.get("protocolVersion")
    if not isinstance(version, str):  # (said as JSON says it: a missing one was "version 'None'")
        said = ("gives no protocolVersion" if "protocolVersion" not in result
                else f"gives a protocolVersion that is {json_kind(version)}, not a version string")
        raise McpError("MCP_START_FAILED", f"the server's initialize answer {said}; "
                                           f"Lens speaks {', '.join(PROTOCOL_VERSIONS)}")
    if version not in PROTOCOL_VERSIONS:
        raise McpError("MCP_START_FAILED", f"the server speaks MCP protocol version "
                                           f"{conn.secrets.cut(str(version), 40)!r}; "
                       f"Lens speaks {', '.join(PROTOCOL_VERSIONS)}")
    conn.protocol_version = version
    conn.server_info = result.get("serverInfo") if isinstance(result.get("serverInfo"), dict) else {}
    conn.capabilities = result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {}
    await conn.notify("notifications/initialized")


async def stop_process(proc: trio.Process, stop_now: StopNow | None = None) -> None:
    """Stop a server and everything in its process group: close stdin, SIGTERM after
    :data:`STDIN_CLOSE_GRACE`, SIGKILL after :data:`TERM_GRACE`; both graces end at once when
    ``stop_now`` is set (the daemon's second stop signal). Returns once the server is
    reaped. Call shielded.

    The server's descendants outside its group (a child that called ``setsid``) are found
    before its stdin closes, while they are still its own, and signalled with the group
    (:mod:`.escaped`)."""
    escaped = Escaped()
    stop_now = stop_now if stop_now is not None else StopNow()
    try:
        # (only while the server is not reaped: its pid, so its descendants, are still its own;
        # no await between the check and the call, which holds the server with a pidfd at once)
        if proc.returncode is None:
            await escaped.add_from(proc.pid)
        if proc.stdin is not None:
            try:
                await proc.stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        pgid = proc.pid  # (start_new_session: the server leads its own group)
        with stop_now.grace(STDIN_CLOSE_GRACE):
            await proc.wait()
        if proc.returncode is None:  # (what it started while its stdin was closing)
            await escaped.add_from(proc.pid)
        _killpg(pgid, signal.SIGTERM)  # (also when the server left: children it started may not have)
        escaped.signal(signal.SIGTERM)
        with stop_now.grace(TERM_GRACE):
            await proc.wait()
        _killpg(pgid, signal.SIGKILL)
        escaped.signal(signal.SIGKILL)
        await proc.wait()
    finally:
        escaped.close()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            await stream.aclose()


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
