"""``lens executor serve --workspace DIR --listen HOST:PORT``: the executor process.

A synchronous grpcio server. Every call must carry ``authorization: Bearer <token>`` (the token
comes from the ``LENS_EXECUTOR_TOKEN`` environment variable, never from argv, and is compared in
constant time) and ``lens-protocol: 8``. Tool calls are delegated to the workspace library
(:mod:`tools.files`); its typed errors come back as ``ok = false`` replies with their codes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

import grpc

from proto import executor_pb2 as pb
from proto import executor_pb2_grpc as pb_grpc
from runtime.errors import shortened  # (imports nothing: no cycle)
from runtime.undumpable import make_undumpable  # (imports nothing of ours)
from tools.files.errors import FileToolError, from_os_error
from tools.files.ignore_cache import IgnoreCache
from tools.files.workspace import EditOutcome, Workspace

from . import EDITING_CALLS, MIN_TOKEN_CHARS, PROTOCOL_VERSION, split_host_port, token_fault
from .commands import (DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT_MS, KILL_GRACE_S, MAX_OUTPUT, MAX_TIMEOUT_MS, Chunk,
                       CommandNotStarted, Exit, run_command)
from .groups import GroupRegistry
from .runs import STOPPED_IDS_MOST, EditingCalls, RunIdRefused, RunRegistry, StopLatch, Stopped, StoppedIds

log = logging.getLogger("lens.executor")
TOKEN_ENV = "LENS_EXECUTOR_TOKEN"
# Commands running at once (each holds a server thread while it streams) and the server's threads:
# at least SERVER_THREADS - MAX_RUNNING_COMMANDS are always left for file tools, probes and hellos.
MAX_RUNNING_COMMANDS = 16
SERVER_THREADS = 48
# The server's threads by name in the kernel's thread list (/proc/<pid>/task/*/comm, `top -H`; at
# most 15 bytes). The pool keeps every thread it started (a ThreadPoolExecutor ends no idle
# thread), so their count is the most calls served at once, at most SERVER_THREADS: named, they
# are told apart from the threads a call starts and must end.
CALL_THREAD_NAME = "lens-ex-call"
# A command stream's send watch (:class:`_SendWatch`), started by a call: named on its own, or it
# would read as a pool thread (a thread inherits its starter's kernel name).
SEND_WATCH_THREAD_NAME = "lens-ex-watch"
# Test-only: with this variable set to "1" the executor also answers the tool ``_test_wait_cancel``
# (writes ``<marker>.started``, blocks until the caller cancels, then writes ``<marker>``), so
# tests can observe that a trio cancellation of a unary call reaches the server. Never set in
# production.
TEST_HOOKS_ENV = "LENS_EXECUTOR_TEST_HOOKS"
# A command stream whose client has taken none of its messages for this long is cancelled: its
# server thread, its command slot and its command are released. (A client that reads nothing
# leaves the handler parked in grpc's send once the stream's flow-control window is full, where no
# check of the command's timeout or of the caller's presence runs; only the call's deadline, or
# none, ended it.) Core reads every stream it opens without waiting on anything else.
SEND_STALL_S = 60.0
# Test-only, read only with TEST_HOOKS_ENV set: another SEND_STALL_S, in seconds.
TEST_SEND_STALL_ENV = "LENS_EXECUTOR_TEST_SEND_STALL_S"
# Test-only, read only with TEST_HOOKS_ENV set: the path of a file naming a point of an editing
# call, ``before_publish`` (its journal record written, the file not yet) or ``before_reply`` (the
# file and its record written, no reply sent), or of the executor's start, ``before_listening``
# (bound, its "listening on" line not yet printed) or ``before_hello`` (a Hello received, not yet
# answered), or ``call:<tool>`` (a Call of that tool received, not yet run: a read, say). The first
# editing call (or start, Hello, Call) to reach that point removes the file, writes ``<file>.held``
# (this process's pid, whole) and blocks there until the process is killed or ``<file>.release`` is
# written: tests kill an executor at an exact point of a call or of its start, or let it go on. An
# executor started later over the same setting finds no file and holds nothing.
TEST_HOLD_ENV = "LENS_EXECUTOR_TEST_HOLD"
# Test-only, read only with TEST_HOOKS_ENV set: another STOPPED_IDS_MOST (how many ids a Stop named
# are remembered), so that a test reaches the bound with a few Stops.
TEST_STOPPED_IDS_ENV = "LENS_EXECUTOR_TEST_STOPPED_IDS"
EXECUTOR_VERSION = "0.1.0"
# The longest ``Stop`` waits for the command's run to end before it answers without the end: the
# group's SIGTERM, SIGKILL after KILL_GRACE_S and the wait for it, with room. A caller's deadline
# shortens it, less STOP_ANSWER_ROOM_S so the answer still reaches the caller in time.
STOP_ANSWER_MAX_S = KILL_GRACE_S + 6.0
STOP_ANSWER_ROOM_S = 0.2


def hold_at(hold: Path | None, point: str) -> None:
    """Block here (until killed, or ``<hold>.release`` is written) when the test-only hold file
    ``hold`` names ``point`` (see TEST_HOLD_ENV; ``hold`` is None unless test hooks are on)."""
    if hold is None:
        return
    try:
        if hold.read_text().strip() != point:
            return
        hold.unlink()  # (claimed: one call holds)
    except OSError:
        return
    # Written whole, then renamed into place: a test that sees ``.held`` reads the pid, never an
    # empty file.
    Path(f"{hold}.held.part").write_text(str(os.getpid()))
    os.replace(f"{hold}.held.part", f"{hold}.held")
    released = Path(f"{hold}.release")  # (a test that lets the call go on writes it)
    while not released.exists():
        time.sleep(0.02)


class CannotListen(Exception):
    """``--listen`` cannot be bound (the host is not a local address, the port is taken): the
    daemon's code for its own bind (a ``--listen`` that is no ``host:port`` is ``INVALID_ARGUMENT``)."""

    code = "LISTEN_FAILED"


class BadSetting(Exception):
    """A setting of the executor's environment it cannot start with (a test-only one)."""

    code = "INVALID_ARGUMENT"


def stopped_ids_most(test_hooks: bool) -> int:
    """How many ids a ``Stop`` named the executor remembers: :data:`STOPPED_IDS_MOST`, or with
    test hooks on, ``TEST_STOPPED_IDS_ENV`` when set. Raises :class:`BadSetting` for a value that
    is no whole number of at least 1 (0 would remember nothing, one below it failed every Stop)."""
    raw = os.environ.get(TEST_STOPPED_IDS_ENV) if test_hooks else None
    if not raw:
        return STOPPED_IDS_MOST
    try:
        most = int(raw)
    except ValueError:
        most = 0
    if most < 1:
        raise BadSetting(f"{TEST_STOPPED_IDS_ENV} {_printable(raw, 80)!r} is not a whole number of at least 1 "
                         f"(how many ids a Stop named the executor remembers)")
    return most


class _Guard(grpc.ServerInterceptor):
    """Refuses calls without the token or with another protocol version, before any handler runs;
    the handlers of the calls it lets through read their requests themselves
    (:func:`_reading_requests_plainly`)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

        def deny(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
            def abort(requests: Any, context: grpc.ServicerContext) -> Any:
                context.abort(code, message)

            # A streaming-request handler runs without waiting for the request: a unary one holds
            # a server thread until the caller's message comes, so a peer without the token that
            # sent only headers could hold every thread for as long as it stayed connected.
            return grpc.stream_stream_rpc_method_handler(abort)

        self._deny = deny

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        meta = dict(details.invocation_metadata or ())
        auth = meta.get("authorization", "")
        presented = auth[7:].encode() if auth.startswith("Bearer ") else b""
        if not hmac.compare_digest(hashlib.sha256(presented).digest(), hashlib.sha256(self._token).digest()):
            return self._deny(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid executor token")
        version = meta.get("lens-protocol")
        if version != str(PROTOCOL_VERSION):
            return self._deny(grpc.StatusCode.FAILED_PRECONDITION,
                              f"core-executor-rpc mismatch: this executor speaks {PROTOCOL_VERSION}, "
                              f"the caller {_printable(version, 40) if version else 'none'}")
        return _reading_requests_plainly(continuation(details), details.method)


def _reading_requests_plainly(handler: grpc.RpcMethodHandler | None, method: str) -> grpc.RpcMethodHandler | None:
    """``handler`` reading its request in the handler: bytes that are no message of the method's
    request type (a truncated field, invalid UTF-8 in a ``string``) are refused ``INVALID_ARGUMENT``
    naming the method. grpc's own reading answered ``INTERNAL`` "Exception deserializing request!",
    the status of a server fault, and logged a traceback for each such request."""
    if handler is None or handler.request_deserializer is None:
        return handler  # (None: an unknown method, which grpc answers UNIMPLEMENTED)
    parse, name = handler.request_deserializer, method.rsplit("/", 1)[-1]

    def reading(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        def read_then_run(raw: bytes, context: grpc.ServicerContext) -> Any:
            try:
                request = parse(raw)
            except Exception:  # protobuf's DecodeError (the C parser says no more than that)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"INVALID_ARGUMENT: the {name} request is not a valid protobuf message of its type "
                              f"(malformed bytes, or a string field that is not UTF-8)")
            return behaviour(request, context)

        return read_then_run

    if handler.unary_unary is not None:
        return handler._replace(request_deserializer=None, unary_unary=reading(handler.unary_unary))
    if handler.unary_stream is not None:
        return handler._replace(request_deserializer=None, unary_stream=reading(handler.unary_stream))
    return handler


# Each tool's argument names: (required, optional). Checked before the call: Python's own
# TypeError for an unknown or missing keyword named our functions ("tools.files.workspace.
# edit_file() got multiple values for keyword argument 'call_id'") and, caught broadly, would
# have passed a defect inside a tool off as the caller's bad argument.
ARGUMENT_NAMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "read_file": (("path",), ("start_line", "max_lines", "offset", "follow_symlinks")),
    "browse_list": ((), ("path", "depth", "max_entries", "include_ignored")),
    "browse_read": (("path",), ("offset", "limit")),
    "read_head": (("path", "limit"), ()),
    "resolve": (("path",), ()),
    "view_image": (("path",), ()),
    "edit_file": (("path", "mode"), ("content", "edits")),
    "patch_file": (("path", "patch"), ()),
}


def check_argument_names(tool: str, args: dict[str, Any]) -> None:
    """``FileToolError(INVALID_ARGUMENT)`` naming an argument ``tool`` does not take, or the first
    it needs and lacks; tools without an entry (``restore``, unknown ones) check their own."""
    names = ARGUMENT_NAMES.get(tool)
    if names is None:
        return
    required, optional = names
    unknown = sorted(k for k in args if k not in required and k not in optional)
    if unknown:
        listed = ", ".join(repr(shortened(k)) for k in unknown[:5]) + (", …" if len(unknown) > 5 else "")
        raise FileToolError("INVALID_ARGUMENT", f"{tool} does not take {listed} "
                                                f"(its arguments: {', '.join(required + optional)})")
    missing = [k for k in required if k not in args]
    if missing:
        raise FileToolError("INVALID_ARGUMENT", f"{tool} needs {', '.join(map(repr, missing))}")


def _order(request: pb.ToolRequest | pb.StopRequest) -> tuple[int, int] | None:
    """The request's place in its Core's sends (``SendOrder``: epoch, seq); None from a Core built
    before it sent one."""
    return (request.order.epoch, request.order.seq) if request.HasField("order") else None


class ExecutorService(pb_grpc.ExecutorServicer):
    def __init__(self, workspace: Workspace, *, groups: GroupRegistry | None = None,
                 test_hooks: bool = False, ignore_cache: IgnoreCache | None = None,
                 send_stall_s: float = SEND_STALL_S, hold: Path | None = None,
                 stopped_ids_most: int = STOPPED_IDS_MOST) -> None:
        self.ws = workspace
        self.groups = groups  # records the process groups of running commands (see .groups)
        # Compiled .gitignore files kept between browse listings (tools.files.ignore_cache): a
        # large one costs seconds of CPU to compile.
        self.ignore_cache = ignore_cache if ignore_cache is not None else IgnoreCache()
        workspace.ignore_cache = self.ignore_cache
        self._call = threading.local()  # the grpc context of the call this handler thread serves
        self._runs = threading.BoundedSemaphore(MAX_RUNNING_COMMANDS)
        # The commands a Stop can name (CommandRequest.run_id), and the ids Stops named: a command
        # arriving after the Stop that named it is refused (the Stop overtook it).
        self.running = RunRegistry(StoppedIds(most=stopped_ids_most))
        # The editing calls a Stop can name too, by their call id: Core, whose caller of one gave
        # up, asks when it has ended, and keeps the domain's write lock until then; one arriving
        # after that Stop is refused, and writes nothing.
        self.calls = EditingCalls(StoppedIds(most=stopped_ids_most))
        workspace.still_wanted = self._caller_waits
        self.test_hooks = test_hooks
        self.send_stall_s = send_stall_s
        self.hold = hold if test_hooks else None  # (see TEST_HOLD_ENV)
        if self.hold is not None:
            workspace.commit_hook = self._hold

    def Hello(self, request: pb.HelloRequest, context: grpc.ServicerContext) -> pb.HelloReply:
        self._hold("before_hello")
        if request.protocol_version != PROTOCOL_VERSION:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"core-executor-rpc mismatch: this executor speaks {PROTOCOL_VERSION}, "
                          f"the caller {request.protocol_version}")
        return pb.HelloReply(protocol_version=PROTOCOL_VERSION, executor_version=EXECUTOR_VERSION,
                             workspace_name=self.ws.root.name)

    def _caller_waits(self) -> bool:
        context = getattr(self._call, "context", None)
        if context is None:
            return True
        latch = getattr(self._call, "latch", None)  # (an editing call's: a Stop may name it)
        return context.is_active() and (latch is None or latch.claim())

    def Call(self, request: pb.ToolRequest, context: grpc.ServicerContext) -> pb.ToolReply:
        self._call.context = context
        try:
            with contextlib.ExitStack() as registered:  # (left: over, a Stop waiting for it answers)
                if request.tool in EDITING_CALLS and request.call_id:
                    # (another call running under the same id has its own latch: a Stop by the id
                    # waits for both; one arriving after a Stop by its id is refused here, unless
                    # Core runs it again on purpose: `rerun`)
                    try:
                        latch = self.calls.running(request.call_id, rerun=request.rerun, order=_order(request))
                        self._call.latch = registered.enter_context(latch)
                    except Stopped as exc:
                        return pb.ToolReply(ok=False, error_code=exc.code, error_message=exc.message)
                self._hold(f"call:{request.tool}")  # (registered: a Stop can name it there)
                return self._call_tool(request, context)
        finally:
            self._call.context = None
            self._call.latch = None

    def _call_tool(self, request: pb.ToolRequest, context: grpc.ServicerContext) -> pb.ToolReply:
        try:
            args = json.loads(request.arguments_json or "{}")
            if not isinstance(args, dict):
                raise FileToolError("INVALID_ARGUMENT", "arguments must be a JSON object")
            if request.tool == "_test_wait_cancel" and self.test_hooks:
                return self._test_wait_cancel(args, context)
            return self._dispatch(request.tool, request.call_id or None, args)
        except FileToolError as exc:
            return pb.ToolReply(ok=False, error_code=exc.code, error_message=_printable(exc.message))
        except json.JSONDecodeError as exc:
            return pb.ToolReply(ok=False, error_code="INVALID_ARGUMENT", error_message=f"arguments are not JSON ({exc.msg})")
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            return pb.ToolReply(ok=False, error_code="INVALID_ARGUMENT",
                                error_message=f"arguments are not usable JSON ({_printable(str(exc))})")
        except RecursionError:
            return pb.ToolReply(ok=False, error_code="INVALID_ARGUMENT", error_message="arguments are nested too deeply")

    def _test_wait_cancel(self, args: dict[str, Any], context: grpc.ServicerContext) -> pb.ToolReply:
        marker = str(args.get("marker", ""))
        if not marker or "/" in marker or marker.startswith("."):
            raise FileToolError("INVALID_ARGUMENT", "marker must be a plain file name")
        (self.ws.root / f"{marker}.started").write_text("started")
        deadline = time.monotonic() + float(args.get("max_s", 30))
        while context.is_active() and time.monotonic() < deadline:
            time.sleep(0.01)
        (self.ws.root / marker).write_text("cancelled" if not context.is_active() else "timeout")
        return pb.ToolReply(ok=True, result_json="{}")

    def _hold(self, point: str) -> None:
        hold_at(self.hold, point)

    def _dispatch(self, tool: str, call_id: str | None, args: dict[str, Any]) -> pb.ToolReply:
        ws = self.ws
        check_argument_names(tool, args)
        if tool == "read_file":
            return pb.ToolReply(ok=True, result_json=json.dumps(ws.read_file(**args), ensure_ascii=False))
        if tool in ("browse_list", "browse_read"):  # workspace browsing (F-HAR-3), read-only
            out_json = ws.browse_list(**args) if tool == "browse_list" else ws.browse_read(**args)
            return pb.ToolReply(ok=True, result_json=json.dumps(out_json, ensure_ascii=False))
        if tool == "resolve":  # where a path leads (the Core's workspace allowlist judges that)
            # (escaped: a name read from the disk need not be UTF-8, and a link may lead to it)
            return pb.ToolReply(ok=True, result_json=json.dumps(ws.resolve_path(**args)))
        if tool == "read_head":  # a file's first bytes as they are (the Core's AGENTS.md)
            data, more = ws.read_head(**args)
            return pb.ToolReply(ok=True, data=data, result_json=json.dumps({"more": more}))
        if tool == "view_image":
            data, mime = ws.view_image(**args)
            return pb.ToolReply(ok=True, data=data, mime=mime,
                                result_json=json.dumps({"path": args.get("path"), "mime": mime, "size": len(data)}))
        if tool == "edit_file":
            out = ws.edit_file(**args, call_id=call_id)
        elif tool == "patch_file":
            out = ws.patch_file(**args, call_id=call_id)
        elif tool == "restore":
            if set(args) != {"path", "content_hex", "expect_sha256"}:  # (a missing content_hex would remove)
                raise FileToolError("INVALID_ARGUMENT", "restore takes exactly path, content_hex (null: remove) "
                                                        "and expect_sha256")
            content = args.get("content_hex")
            try:
                data = bytes.fromhex(content) if content is not None else None
            except (TypeError, ValueError):
                raise FileToolError("INVALID_ARGUMENT", "content_hex must be hexadecimal text or null") from None
            out = ws.restore(args.get("path", ""), data, args.get("expect_sha256"), call_id=call_id)
            return edit_reply(tool, out)
        else:
            raise FileToolError("TOOL_UNKNOWN", f"the executor has no tool {shortened(tool)!r}")
        self._hold("before_reply")
        return edit_reply(tool, out)

    def Run(self, request: pb.CommandRequest, context: grpc.ServicerContext) -> Any:
        # A bound past its most is refused, not lowered: a command run under a shorter timeout or
        # a smaller cap than asked would end "timed out" or "truncated" with nothing saying why.
        for name, value, most in (("timeout_ms", request.timeout_ms, MAX_TIMEOUT_MS),
                                  ("max_output_bytes", request.max_output_bytes, MAX_OUTPUT)):
            if value > most:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"INVALID_ARGUMENT: {name} {value} is past the most, {most} (0: the default)")
        timeout = request.timeout_ms or DEFAULT_TIMEOUT_MS
        cap = request.max_output_bytes or DEFAULT_MAX_OUTPUT
        if "\0" in request.command or "\0" in request.cwd or "\0" in request.cwd_leads_to:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT: command and cwd cannot hold NUL characters")
        try:
            # (the directory the walk reached, held open: the shell starts in it, not in whatever
            # its host path names by then)
            cwd = self.ws.open_directory(request.cwd or ".", request.cwd_leads_to or None)
        except FileToolError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{exc.code}: {_printable(exc.message)}")
        try:
            # Each running command holds a server thread: a cap leaves threads for every other call.
            if not self._runs.acquire(blocking=False):
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"TOO_MANY_COMMANDS: at most {MAX_RUNNING_COMMANDS} commands run at once on this executor")
            try:
                with self.running.running(request.run_id) as latch:
                    yield from self._run(request.command, cwd, timeout, cap, context, latch)
            except RunIdRefused as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{exc.code}: {exc.message}")
            except Stopped as exc:  # (a Stop by its run_id came first: the caller gave it up)
                context.abort(grpc.StatusCode.ABORTED, f"{exc.code}: {exc.message}")
            except CommandNotStarted as exc:  # (its OSError names the host path: never sent)
                code = from_os_error(exc.error, "cwd").code
                shown = request.cwd or "."
                shown = shown if len(shown) <= 80 else shown[:80] + "…"
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{code}: cannot start the command in cwd {_printable(shown)!r}: {str(exc).lower()}")
            finally:
                self._runs.release()
        finally:
            os.close(cwd)

    def _run(self, command: str, cwd: int, timeout: int, cap: int, context: grpc.ServicerContext,
             stop: StopLatch | None) -> Any:
        items = run_command(command, cwd, timeout_ms=timeout, max_output=cap,
                            cancelled=lambda: not context.is_active(), groups=self.groups, stop=stop)
        watch = _SendWatch(context, self.send_stall_s)
        try:
            for item in items:
                if isinstance(item, Chunk):
                    event = pb.CommandEvent(**{item.stream: item.data})
                elif isinstance(item, Exit):
                    event = pb.CommandEvent(exit=pb.CommandExit(exit_code=item.exit_code, timed_out=item.timed_out,
                                                                truncated=item.truncated, duration_ms=item.duration_ms,
                                                                stopped=item.stopped))
                else:
                    continue
                # grpc asks for the next event once this one is sent: the time in between is the
                # time the client takes to make room for it.
                watch.sending()
                yield event
                watch.sent()
                if stop is not None and isinstance(item, Exit):
                    stop.over(event.exit)  # (sent: a Stop waiting for the end answers with it)
        finally:
            watch.close()
            items.close()  # (the command's group is ended here when the stream is given up)

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopReply:
        # The command's own Run ends its group (SIGTERM, SIGKILL after KILL_GRACE_S) and sends its
        # exit; this asks it to, then answers once it has, with that exit: the caller learns how
        # the command ended with no race against the command's own end. The wait ends before the
        # caller's deadline (so the answer still reaches it) and when the caller goes away.
        remaining = context.time_remaining()
        bound = STOP_ANSWER_MAX_S if remaining is None else min(STOP_ANSWER_MAX_S, remaining - STOP_ANSWER_ROOM_S)
        # (each registry remembers the id, bounded: a command or an editing call that the Stop
        # overtook, still on its way or waiting for a thread, is refused CANCELLED when it comes)
        latch = self.running.stop(request.run_id)
        if latch is None:
            # An editing call's id (Core's, whose caller gave up): a call that has not looked yet
            # whether its caller waits writes nothing now (its look finds the stop), so it is
            # ended at once; one that looked and may be writing is waited for as a command.
            ended = self.calls.stop(request.run_id, bound, lambda: not context.is_active(), _order(request))
            reply = pb.StopReply(found=False) if ended is None else pb.StopReply(found=True, ended=ended)
            if ended is not False:  # (over, or none ran: one that completed wrote its journal record)
                done = self._completed(request.run_id)
                if done is not None:
                    reply.call.CopyFrom(done)
            return reply
        over, exit_ = latch.wait_over(bound, lambda: not context.is_active())
        if not over:
            return pb.StopReply(found=True)
        return pb.StopReply(found=True, ended=True, exit=exit_) if exit_ is not None else pb.StopReply(found=True, ended=True)

    def _completed(self, call_id: str) -> pb.ToolReply | None:
        """The reply of the editing call that completed under ``call_id``, from its journal record
        (as a run of it again answers), for a ``Stop`` naming it: the call wrote, though its caller
        went away. None when none did, or its record cannot be read (logged: the ``Stop`` is
        answered all the same, without it)."""
        try:
            got = self.ws.recorded(call_id)
        except FileToolError as exc:
            log.warning("the call journal's record of a stopped call could not be read (%s)", exc.code)
            return None
        except OSError as exc:  # (a record or its bytes the file system will not give: EIO, EACCES, EISDIR)
            log.warning("the call journal's record of a stopped call could not be read (%s)",
                        exc.strerror or type(exc).__name__)
            return None
        return None if got is None else edit_reply(*got)

    def Probe(self, request: pb.ProbeRequest, context: grpc.ServicerContext) -> pb.ProbeReply:
        try:
            data, _ = self.ws.read_bytes(request.path)
        except FileToolError:
            return pb.ProbeReply(seen=False)
        expected = request.sha256.encode("utf-8", "surrogatepass")  # (str comparison refuses non-ASCII)
        return pb.ProbeReply(seen=hmac.compare_digest(hashlib.sha256(data).hexdigest().encode(), expected))


class _SendWatch:
    """Cancels a streaming call whose client has not taken its last message for ``bound`` seconds.

    The handler thread is then parked in grpc's send, where nothing it runs can notice; the watch
    thread cancels the call, the send returns, grpc stops iterating and the handler's generator is
    closed (which ends the command and frees its slot). One thread per stream, ended by
    :meth:`close`."""

    def __init__(self, context: grpc.ServicerContext, bound: float) -> None:
        self._context = context
        self._bound = bound
        self._cond = threading.Condition()
        self._since: float | None = None
        self._closed = False
        start_named_thread(self._watch, SEND_WATCH_THREAD_NAME)

    def sending(self) -> None:
        with self._cond:
            self._since = time.monotonic()
            self._cond.notify()

    def sent(self) -> None:
        with self._cond:
            self._since = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._since is None:
                    self._cond.wait()
                    continue
                left = self._since + self._bound - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            else:
                return
        log.warning("a command stream's client took none of its output for %g s: the call is cancelled and "
                    "its command ended", self._bound)
        self._context.cancel()


def build_server(service: ExecutorService, token: str) -> grpc.Server:
    """A grpc server (not yet listening nor started) serving ``service`` to callers with ``token``."""
    pool = futures.ThreadPoolExecutor(max_workers=SERVER_THREADS, thread_name_prefix=CALL_THREAD_NAME,
                                      initializer=name_this_thread, initargs=(CALL_THREAD_NAME,))
    server = grpc.server(pool, interceptors=[_Guard(token)],
                         options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                  ("grpc.max_send_message_length", 64 * 1024 * 1024),
                                  # (grpc's default is SO_REUSEPORT: a second executor would share
                                  # the port, the kernel spreading connections over both)
                                  ("grpc.so_reuseport", 0)])
    pb_grpc.add_ExecutorServicer_to_server(service, server)
    return server


def serve(workspace: Path, listen: str, token: str, *, state_dir: Path | None = None,
          ready: Callable[[int], None] | None = None, stop: threading.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT/SIGHUP when run as the CLI). Raises
    :class:`BadSetting` (before anything is done) and :class:`CannotListen`."""
    test_hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
    most = stopped_ids_most(test_hooks)
    ws = Workspace(workspace, journal_dir=state_dir)
    groups = GroupRegistry(state_dir)
    groups.reap()  # commands a killed predecessor left running
    stall = float(os.environ.get(TEST_SEND_STALL_ENV) or SEND_STALL_S) if test_hooks else SEND_STALL_S
    hold = os.environ.get(TEST_HOLD_ENV) if test_hooks else None
    service = ExecutorService(ws, groups=groups, test_hooks=test_hooks, send_stall_s=stall,
                              hold=Path(hold) if hold else None, stopped_ids_most=most)
    server = build_server(service, token)
    bind_problem = _bind_problem(listen)
    if bind_problem is not None:  # (before grpc tries: it prints a log line of its own, and no reason)
        raise CannotListen(f"cannot listen on {listen!r} ({bind_problem})")
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError:  # grpc: the host does not resolve, the port is taken, ...
        port = 0
    if port == 0:
        raise CannotListen(f"cannot listen on {listen!r} (the host does not resolve to a local address, or the "
                           f"port is in use)")
    server.start()
    hold_at(service.hold, "before_listening")
    if ready is not None:
        ready(port)
    stop = stop or threading.Event()
    stop.wait()
    server.stop(grace=2.0).wait()


def main(workspace: str, listen: str, state: str | None, *, token_stdin: bool = False,
         exit_with_stdin: bool = False) -> int:
    # The daemon hands its local executors the token on standard input: what is in a process's
    # environment, its commands (same user) can read from /proc/<executor pid>/environ.
    token = sys.stdin.readline().strip() if token_stdin else os.environ.get(TOKEN_ENV, "")
    if len(token) < MIN_TOKEN_CHARS:
        where = "the first line of standard input" if token_stdin else TOKEN_ENV
        _fail("EXECUTOR_TOKEN_MISSING", f"set {where} to the shared secret (at least {MIN_TOKEN_CHARS} characters)")
        return 2
    fault = token_fault(token)
    if fault is not None:
        where = "the token on standard input" if token_stdin else TOKEN_ENV
        _fail("EXECUTOR_TOKEN_INVALID", f"{where} {fault}")
        return 2
    # (its /proc files closed to the commands it runs, where the token may still be in the environment:
    # a remote executor started with LENS_EXECUTOR_TOKEN; best effort, Linux only)
    make_undumpable()
    if not _is_host_port(listen):
        _fail("INVALID_ARGUMENT", f"cannot listen on {_printable(listen, 200)!r}: --listen must be HOST:PORT with a "
              f"port from 0 (any free one) to 65535, an IPv6 address in brackets")
        return 2
    if not workspace:
        # (Path("") is the current directory: `--workspace "$WS"` with WS unset would serve
        # wherever the executor was started, a home directory as readily as a project.)
        _fail("WORKSPACE_INVALID", "workspace is empty: --workspace needs a directory")
        return 2
    # `~` is the home directory, as in `lens serve --data` (`--state=~/x`, which no shell expands,
    # made a directory named `~` in the working directory); an empty --state is refused as an
    # empty --data is (it was taken for the default). (runtime.config is loaded already: the CLI
    # read the config's keys with it.)
    from runtime.config import ConfigError, expand_path
    try:
        root = expand_path(workspace, "--workspace", "the command line")
    except ConfigError as exc:
        _fail("WORKSPACE_INVALID", exc.message)
        return 2
    if not root.is_dir():
        _fail("WORKSPACE_INVALID", f"workspace {_printable(workspace, 500)} is not a directory")
        return 2
    try:
        state_dir = expand_path(state, "--state", "the command line") if state is not None \
            else _default_state_dir(root)
    except ConfigError as exc:
        _fail("STATE_DIR_INVALID", exc.message)
        return 2
    if _overlaps(state_dir, root):
        # The state holds the call journal and the records of running commands (which a later
        # executor kills); inside the workspace, the agent's own tools could rewrite them.
        _fail("STATE_DIR_INVALID", f"the state directory {state_dir} lies inside the workspace or holds it; "
              f"pass --state with a directory outside {workspace}")
        return 2
    problem = _state_dir_problem(state_dir)
    if problem is not None:
        _fail("STATE_DIR_INVALID", problem)
        return 2
    stop = threading.Event()
    _stop_on_signals(stop)
    if exit_with_stdin:
        start_named_thread(_stop_at_end_of_stdin, "lens-ex-stdin", stop)
    host = listen.rsplit(":", 1)[0]

    def ready(port: int) -> None:
        print(f"lens executor: listening on {host}:{port}", flush=True)

    try:
        serve(root, listen, token, state_dir=state_dir, ready=ready, stop=stop)
    except (BadSetting, CannotListen) as exc:
        _fail(exc.code, str(exc))
        return 2
    finally:
        _ignore_stop_signals()
    return 0


def _bind_problem(listen: str) -> str | None:
    """Why ``listen`` (a ``host:port`` :func:`_is_host_port` took) cannot be bound, as the system
    says it (the host does not resolve, is no address of this machine, the port is in use), or
    None when some address it resolves to can be bound now: then grpc binds it (a port taken in
    between is still refused, by grpc's own bind)."""
    parts = split_host_port(listen)
    if parts is None:
        return None
    host, port = parts[0].removeprefix("[").removesuffix("]"), parts[1]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        return f"the host does not resolve: {getattr(exc, 'strerror', None) or exc}"
    problem = "the host resolves to no address"
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as grpc binds)
                probe.bind(address)
            return None
        except OSError as exc:
            problem = exc.strerror or str(exc)
    return problem


def _state_dir_problem(state_dir: Path) -> str | None:
    """Why the state directory cannot hold the call journal and the command records, or None."""
    fix = "pass --state with a directory it can create and write"
    for directory in (state_dir, *(state_dir / name for name in ("calls", "blobs", "commands"))):
        if os.path.lexists(directory) and not directory.is_dir():
            return f"cannot use the state directory {state_dir}: {directory} is not a directory; {fix}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot make the state directory {state_dir}: {directory}: {exc.strerror or exc}; {fix}"
    if not os.access(state_dir, os.W_OK | os.X_OK):
        return f"the state directory {state_dir} cannot be written; pass --state with one it can write"
    return None


def _fail(code: str, message: str) -> None:
    """A refusal to start, as the other ``lens`` commands report theirs: ``lens executor: CODE: message``."""
    print(f"lens executor: {code}: {message}", file=sys.stderr)


def _is_host_port(listen: str) -> bool:
    """``host:port`` with a port of 0-65535 (grpc takes other ports modulo 2^16, or any free one)
    and a bracketed IPv6 host (in a bare one, which colon starts the port is a guess)."""
    parts = split_host_port(listen)
    return parts is not None and bool(parts[0]) and not any(ch.isspace() or ch in "\0/" for ch in parts[0])


# SIGHUP too (a remote executor's terminal closed): by default it killed the executor outright,
# leaving its commands running. One it was started ignoring (`nohup`) stays ignored, as the daemon's.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` on SIGTERM, SIGINT or SIGHUP, from a thread, never from a signal handler.

    A handler that set the event ran in the main thread, which waits on that event: a signal
    landing while the main thread held the event's lock (it had just been woken by the stdin
    lifeline, and the daemon closes stdin and sends SIGTERM together) made the handler wait for
    that lock for ever, and the executor outlived its daemon. Now the handlers do nothing; the
    interpreter writes each signal's number to a pipe (``signal.set_wakeup_fd``, in C, taking no
    lock) and a thread reading that pipe sets ``stop``."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_end, False)  # (the interpreter requires it: a full pipe drops a byte)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda *_: None)

    def watch() -> None:
        while True:
            got = os.read(read_end, 64)
            if not got or any(b in STOP_SIGNALS for b in got):  # (other signals' numbers come too)
                stop.set()
                return

    start_named_thread(watch, "lens-ex-signals")


def _ignore_stop_signals() -> None:
    """Ignore the stop signals once serving is over (no command is started after it). The
    interpreter's exit puts back the default action of every signal a Python handler took, and
    one more SIGTERM of a burst (the daemon's, an operator's repeated Ctrl-C) landing then killed
    the executor that was already stopping cleanly: it ended by the signal, not with 0."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _stop_at_end_of_stdin(stop: threading.Event) -> None:
    """Set ``stop`` once standard input ends: the daemon that spawned us holds the pipe's other
    end, and the kernel closes it however the daemon dies (SIGKILL included)."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    stop.set()


def start_named_thread(target: Callable[..., object], name: str, *args: object) -> None:
    """Start a daemon thread running ``target(*args)``, named ``name`` (at most 15 bytes) in
    Python and in the kernel's thread list: a thread inherits the kernel name of the one that
    starts it, so one started by a call would otherwise read as a pool thread
    (:data:`CALL_THREAD_NAME`)."""
    def run() -> None:
        name_this_thread(name)
        target(*args)

    threading.Thread(target=run, name=name, daemon=True).start()


def name_this_thread(name: str) -> None:
    """Give the calling thread ``name`` (cut to 15 bytes) in the kernel's thread list
    (``PR_SET_NAME``). Best effort, never raises: Linux only, and it runs as a pool's initializer,
    where an exception would break the pool."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME = 15
    except Exception:  # noqa: BLE001 (a name is worth no failed call)
        pass


def _overlaps(state_dir: Path, root: Path) -> bool:
    state_real, root_real = Path(os.path.realpath(state_dir)), Path(os.path.realpath(root))
    return state_real == root_real or root_real in state_real.parents or state_real in root_real.parents


def _default_state_dir(root: Path) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return base / "lens" / "executor" / digest


def edit_reply(tool: str, out: EditOutcome) -> pb.ToolReply:
    """An editing call's reply: its result, the bytes before and after, the file it wrote (which
    travels with the result: Core records it without asking ``resolve``)."""
    result = out.structured
    if tool == "restore":
        # The reply's ``after`` bytes cannot say "no file" (proto3 bytes have no presence), so a
        # restore that removed the file says so in its result.
        result = {**result, "removed": out.after is None}
    return pb.ToolReply(ok=True, result_json=json.dumps(result, ensure_ascii=False),
                        has_before=out.before is not None, before=out.before or b"", after=out.after or b"",
                        written_path=_fs_bytes(out.written))


def _fs_bytes(path: str | None) -> bytes:
    """A workspace-relative path as the file system's bytes (a name read from the disk need not
    be UTF-8); empty for None, and for a name no file system has (the edit is done by then: it
    is not failed for want of its name)."""
    try:
        return os.fsencode(path) if path else b""
    except UnicodeEncodeError:
        return b""


def _printable(message: str, limit: int = 2000) -> str:
    """A message safe to put in a reply: lone surrogates (echoed from arguments) escaped, since
    protobuf strings must be UTF-8, and its length bounded."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "…"
