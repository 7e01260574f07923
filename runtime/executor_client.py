"""Core's side of the executor contract: the grpcio ↔ trio bridge and typed errors.

Unary calls go through ``stub.X.future()`` with a done-callback into trio, so trio
cancellation cancels the RPC on the server; server streams are pumped by a worker thread into a
memory channel, and leaving the stream (or being cancelled) calls ``call.cancel()``. grpc errors
are translated here, once, into :class:`ExecutorError` subclasses with stable codes.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, ClassVar

import grpc
import trio

from proto import executor_pb2 as pb
from proto import executor_pb2_grpc as pb_grpc
from tools.executor import PROTOCOL_VERSION
from tools.executor.commands import DEFAULT_TIMEOUT_MS

from .errors import LensError

CONNECT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 120.0
# A command stream's deadline past the command's own timeout: time for the executor to stop the
# process group and send the last events. Without a deadline, an executor that stopped answering
# without closing its connection (stopped, or cut off by the network) held the call, and the
# workspace's write lock, until the session was aborted.
RUN_DEADLINE_MARGIN_S = 30.0
# grpc waits longer and longer between attempts to reconnect a channel that lost its executor
# (1 s, ×1.6 each time, up to 120 s by default): a remote executor back after a minute away was
# still refused for ~35 s. Capped, calls reach it within about this long of its return.
RECONNECT_BACKOFF_MAX_MS = 2000
# The largest gRPC message either way (the executor sets the same): a call or reply past it is
# refused by grpc itself, and comes back as TOO_LARGE.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# What a command stream may hold in Core that its reader has not taken yet: this many events (of at
# most 64 KiB each) between the pump thread and the reader, and a fixed HTTP/2 receive window. grpc
# grows a window by its estimate of the bandwidth-delay product (4–14 MiB measured on loopback), and
# a 64-event channel held 4 MiB more: a stream whose reader fell behind kept 9–18 MiB in the daemon,
# 16 at once up to 300 MiB. With 4 events and 1 MiB the bound is about 1.5 MiB a stream; 16 MiB of
# output still streams on loopback as fast as before (about 0.15 s), and a remote executor gets
# 1 MiB a round trip (about 20 MB/s at 50 ms).
STREAM_BUFFER_EVENTS = 4
# How long a command stream whose exit came is let end by itself (the executor frees the command's
# slot just before that end) before it is cancelled.
EXIT_END_WAIT_S = 2.0
RECEIVE_WINDOW_BYTES = 1024 * 1024


class ExecutorError(LensError):
    code: ClassVar[str] = "EXECUTOR_ERROR"


class ExecutorUnavailable(ExecutorError):
    """``unsent``: the call never reached the executor: grpc found no connection to send it on
    (every address of the channel refused it or failed to connect). A call grpc had put on a
    connection that then failed is never so (its status names the connection's end: "Socket
    closed", a reset), even one whose answer had not begun: a command the executor runs sends
    nothing back, not even headers, until its first output."""

    code = "EXECUTOR_UNAVAILABLE"

    def __init__(self, message: str, *, status: str = "", unsent: bool = False) -> None:
        super().__init__(message)
        self.status = status  # the grpc status name (UNAVAILABLE, DEADLINE_EXCEEDED, ...) when known
        self.unsent = unsent


class ExecutorTimeout(ExecutorUnavailable):
    """The call ran past its deadline (grpc ``DEADLINE_EXCEEDED``). As a rule the executor was
    reached and is working (a listing of a huge tree, a long search); it may also be a host that
    takes no connection and refuses none. A kind of :class:`ExecutorUnavailable` — whoever
    handles that handles this — with a code of its own, so a client can tell "too slow" from
    "down" (the browsing routes answer 504, not 503)."""

    code = "EXECUTOR_TIMEOUT"


class ExecutorVersionMismatch(ExecutorError):
    code = "EXECUTOR_VERSION_MISMATCH"


class ExecutorUnauthenticated(ExecutorError):
    code = "EXECUTOR_UNAUTHENTICATED"


class ExecutorToolError(ExecutorError):
    """The tool refused the call (its own stable code, e.g. NO_MATCH, PATH_OUTSIDE_WORKSPACE)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


# How grpc's load balancing fails a call it could put on no connection (the channel's addresses
# all refused or failed to connect): such a call was never sent. (grpc retries by itself, and so
# may fail this way, only a call no server has seen.)
_NO_CONNECTION = "failed to connect to all addresses"
_TOOL_CODE = re.compile(r"^([A-Z][A-Z0-9_]+): (.*)$", re.S)
# Codes an executor built before a rename still sends, as Core names them (one code per meaning:
# a tool nobody has is TOOL_UNKNOWN whether Core or the executor finds it so).
_RENAMED = {"UNKNOWN_TOOL": "TOOL_UNKNOWN"}


def translated_code(code: str) -> str:
    """An executor's error code as Core passes it on (``EXECUTOR_ERROR`` when it sent none)."""
    return _RENAMED.get(code, code) or "EXECUTOR_ERROR"


def translate(exc: grpc.RpcError) -> ExecutorError:
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return ExecutorUnauthenticated(f"the executor refused our token: {detail}")
    if code == grpc.StatusCode.FAILED_PRECONDITION and "mismatch" in (detail or ""):
        return ExecutorVersionMismatch(str(detail))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (detail or ""):
        # grpc's own refusal of a message past MAX_MESSAGE_BYTES ("CLIENT: Sent message larger
        # than max (N vs. M)"): its "CLIENT"/"SERVER" prefix is no tool code.
        return ExecutorToolError("TOO_LARGE", f"the call or its reply is larger than an executor call carries "
                                              f"({MAX_MESSAGE_BYTES} bytes): {detail}")
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED):
        # A tool-level refusal outside a ToolReply (a command's cwd, too many commands at once, a
        # command whose Stop came first): "CODE: message".
        m = _TOOL_CODE.match(detail or "")
        if m:
            return ExecutorToolError(translated_code(m.group(1)), m.group(2))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        # (reached, as a rule, and working: a listing of a huge tree, a long search; "not
        # reachable" sent operators looking for a dead executor)
        return ExecutorTimeout(f"the executor did not answer within the call's deadline ({code.name}: {detail})",
                               status=code.name)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return ExecutorUnavailable(f"the executor is not reachable ({code.name if code else '?'}: {detail})",
                                   status=code.name if code else "",
                                   unsent=code == grpc.StatusCode.UNAVAILABLE
                                   and (detail or "").startswith(_NO_CONNECTION))
    return ExecutorError(f"executor call failed ({code.name if code else '?'}: {detail})")


async def unary(method: Any, request: Any, *, metadata: tuple[tuple[str, str], ...], timeout: float) -> Any:
    """Call a grpcio unary method without blocking trio; trio cancellation cancels the RPC."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: Any) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    fut = method.future(request, timeout=timeout, metadata=metadata)
    fut.add_done_callback(wake)
    try:
        await done.wait()
    finally:
        if not fut.done():
            fut.cancel()
    try:
        return fut.result()
    except grpc.RpcError as exc:
        raise translate(exc) from None


@dataclass
class ToolOutcome:
    result: dict[str, Any]
    before: bytes | None = None  # editing tools: None when the file did not exist
    after: bytes | None = None
    data: bytes = b""
    mime: str = ""
    # Editing tools: the file written, the canonical workspace-relative path the call's path led
    # to (bytes that are not UTF-8 kept as lone surrogates, as resolve's JSON brings them). None
    # when the executor did not say (one built before it did, a call replayed from a journal
    # record older than that).
    written_path: str | None = None


def tool_outcome(tool: str, reply: pb.ToolReply) -> ToolOutcome:
    """A ``Call``'s reply for ``tool`` as its outcome (a ``Stop``'s ``call`` too: the reply of an
    editing call that completed after its caller had gone). Raises :class:`ExecutorToolError`
    with the tool's own code for a reply not ``ok``, ``EXECUTOR_ERROR`` for a result that is JSON
    but not an object (every tool's result is one); ``ValueError`` for one not JSON."""
    if not reply.ok:
        raise ExecutorToolError(translated_code(reply.error_code), reply.error_message)
    result = json.loads(reply.result_json or "{}")
    if not isinstance(result, dict):
        raise ExecutorToolError("EXECUTOR_ERROR", f"the executor's result for {tool} is not a JSON object "
                                                  f"(a {type(result).__name__})")
    editing = tool in ("edit_file", "patch_file", "restore")
    removed = tool == "restore" and bool(result.get("removed"))
    return ToolOutcome(result, reply.before if reply.has_before else None,
                       reply.after if editing and not removed else None, reply.data, reply.mime,
                       reply.written_path.decode("utf-8", "surrogateescape")
                       if editing and reply.written_path else None)


def run_deadline_s(timeout_ms: int) -> float:
    """The gRPC deadline of a command stream: the command's timeout (0: the executor's default,
    which it applies too) plus :data:`RUN_DEADLINE_MARGIN_S`."""
    return (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000 + RUN_DEADLINE_MARGIN_S


class SendOrder:
    """The order of one Core process's sends to its executors (``pb.SendOrder``), shared by its
    pool's clients: ``epoch`` names the pool (64 random bits, never 0), and each ``Call`` and
    ``Stop`` takes the next ``seq`` as its request is made. A ``Stop`` for a call Core gave up is
    made after that call's send, and a re-run made after the ``Stop``: the executor refuses a
    re-run whose seq is below a ``Stop``'s of the same epoch (the ``Stop`` gave it up, and
    overtook it), and runs one above (see ``tools.executor.runs.StoppedIds``). Made once per
    pool (no global state); used from trio's thread only."""

    def __init__(self) -> None:
        self.epoch = secrets.randbits(64) or 1
        self._seq = itertools.count(1)

    def next(self) -> pb.SendOrder:
        return pb.SendOrder(epoch=self.epoch, seq=next(self._seq))


class ExecutorClient:
    """One executor at ``address``. Thread-safe channel; reconnection is grpc's (the channel
    retries the connection, at most :data:`RECONNECT_BACKOFF_MAX_MS` apart). :meth:`hello` runs once, when the pool connects (or spawns a new
    child); every call carries the protocol version, so an executor replaced meanwhile by one of
    another version is refused with the typed version-mismatch error, not misread."""

    def __init__(self, address: str, token: str, *, stream_limiter: trio.CapacityLimiter | None = None,
                 order: SendOrder | None = None) -> None:
        self.address = address
        # Where each Call and Stop is made in Core's sends: the pool's, shared by its clients.
        self.order = order if order is not None else SendOrder()
        self._meta = (("authorization", f"Bearer {token}"), ("lens-protocol", str(PROTOCOL_VERSION)))
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
            ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", RECEIVE_WINDOW_BYTES)])
        self._stub = pb_grpc.ExecutorStub(self._channel)
        self._streams = stream_limiter or trio.CapacityLimiter(16)
        self.hello_reply: pb.HelloReply | None = None
        # Set when a call found the executor unreachable (grpc UNAVAILABLE: connection refused or
        # reset); the pool then checks whether a local child died before handing it out again.
        self.lost = False
        # Calls and streams in progress, and when the last one ended (trio time): the pool stops
        # a local child that nothing has used for a while.
        self.calls = 0
        self.used: float | None = None

    @asynccontextmanager
    async def _in_use(self) -> AsyncIterator[None]:
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1
            self.used = trio.current_time()

    def _note(self, exc: BaseException) -> None:
        if isinstance(exc, ExecutorUnavailable) and exc.status == "UNAVAILABLE":
            self.lost = True

    async def _unary(self, method: Any, request: Any, timeout: float) -> Any:
        try:
            async with self._in_use():
                reply = await unary(method, request, metadata=self._meta, timeout=timeout)
        except ExecutorError as exc:
            self._note(exc)
            raise
        self.lost = False
        return reply

    def close(self) -> None:
        self._channel.close()

    @property
    def stream_slots(self) -> int:
        """How many command streams the client opens at once (the executor runs as many)."""
        return int(self._streams.total_tokens)

    async def hello(self, timeout: float = CONNECT_TIMEOUT_S) -> pb.HelloReply:
        """The version handshake; raises :class:`ExecutorVersionMismatch` naming both versions."""
        reply = await self._unary(self._stub.Hello, pb.HelloRequest(protocol_version=PROTOCOL_VERSION), timeout)
        if reply.protocol_version != PROTOCOL_VERSION:
            raise ExecutorVersionMismatch(
                f"core-executor-rpc mismatch: Core speaks {PROTOCOL_VERSION}, the executor {reply.protocol_version}")
        self.hello_reply = reply
        return reply

    async def call(self, tool: str, arguments: dict[str, Any], *, call_id: str = "",
                   timeout: float | None = None, rerun: bool = False) -> ToolOutcome:
        """Run one workspace tool; raises :class:`ExecutorToolError` with the tool's own code.
        ``timeout``: the call's deadline (None: :data:`CALL_TIMEOUT_S`, read as the call is made).
        ``rerun``: Core runs the call again under ``call_id`` on purpose (``ToolRequest.rerun``);
        the request carries its place in Core's sends (:class:`SendOrder`), made now."""
        req = pb.ToolRequest(tool=tool, call_id=call_id, arguments_json=json.dumps(arguments), rerun=rerun,
                             order=self.order.next())
        return tool_outcome(tool, await self._unary(self._stub.Call, req,
                                                    CALL_TIMEOUT_S if timeout is None else timeout))

    async def probe(self, path: str, sha256: str) -> bool:
        reply = await self._unary(self._stub.Probe, pb.ProbeRequest(path=path, sha256=sha256), CONNECT_TIMEOUT_S)
        return bool(reply.seen)

    async def stop(self, run_id: str, timeout: float) -> pb.StopReply:
        """Ask the executor to stop the command it runs under ``run_id`` (see :meth:`run`): its
        stream then ends with the exit, ``stopped`` set. The answer's ``found`` is false when it
        runs none by that id; ``ended``: it answered once the command's run was over, with the
        exit its stream sent in ``exit`` (an executor built before ``ended`` answers at once).
        The request carries its place in Core's sends (:class:`SendOrder`): a re-run of a call
        sent before it is refused, one sent after it runs.
        Raises :class:`ExecutorError` (an executor built before ``Stop``: UNIMPLEMENTED)."""
        return await self._unary(self._stub.Stop, pb.StopRequest(run_id=run_id, order=self.order.next()), timeout)

    @asynccontextmanager
    async def _slot(self, wait_s: float | None) -> AsyncIterator[None]:
        """One of the client's stream slots, waited for at most ``wait_s`` (None: unbounded)."""
        if wait_s is None:
            async with self._streams:
                yield
            return
        # A free slot is taken at once, whatever the wait: ``move_on_after(0)`` would cancel the
        # acquire before it looked (a command's last resend comes with no wait left).
        got = False
        try:
            self._streams.acquire_nowait()
            got = True
        except trio.WouldBlock:
            with trio.move_on_after(wait_s):
                await self._streams.acquire()
                got = True
        if not got:
            raise ExecutorToolError(
                "TOO_MANY_COMMANDS",
                f"all {int(self._streams.total_tokens)} command streams of this workspace's executor are in use "
                f"(background jobs and other sessions' commands hold them while they run) and none came free "
                f"within {wait_s:g} s; stop a job, or wait for one to end, and run it again")
        try:
            yield
        finally:
            self._streams.release()

    @asynccontextmanager
    async def run(self, command: str, *, timeout_ms: int = 0, max_output_bytes: int = 0,
                  cwd: str = "", cwd_leads_to: str = "", run_id: str = "",
                  slot_wait_s: float | None = None) -> AsyncIterator[trio.MemoryReceiveChannel[pb.CommandEvent]]:
        """Stream a command's events; leaving the block (or cancellation) cancels it on the executor.
        ``cwd_leads_to``: where ``cwd`` was judged to lead (``resolve``); the executor refuses
        to start the command (``CWD_MOVED``) when its walk reaches another directory.
        ``run_id``: the id :meth:`stop` names the command by (empty: none).
        ``slot_wait_s``: how long to wait for one of the client's stream slots when all are
        taken (None: as long as it takes); past it, ``TOO_MANY_COMMANDS`` and nothing is sent.

        A failure of the stream arrives in-band as an :class:`ExecutorError` item: raise it (it
        comes out of the block as itself; the block opens no nursery).
        """
        req = pb.CommandRequest(command=command, timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, cwd=cwd,
                                cwd_leads_to=cwd_leads_to, run_id=run_id)
        # No nursery here: an exception raised by the caller's block must come out as itself, not
        # wrapped in an ExceptionGroup. The pump is a plain thread; leaving the block cancels the
        # call (which ends the thread's iteration) and waits for the thread to finish.
        async with self._slot(slot_wait_s), self._in_use():  # one slot per open stream
            call = self._stub.Run(req, metadata=self._meta, timeout=run_deadline_s(timeout_ms))
            send, recv = trio.open_memory_channel[Any](STREAM_BUFFER_EVENTS)
            trio_token = trio.lowlevel.current_trio_token()
            finished = trio.Event()
            # Set once the command's exit came, before it is handed to the consumer: a consumer
            # that returns at the exit (run_command, a job) reaches the block's end while the pump
            # is still handing it over, and must find it set.
            exited: list[bool] = []

            def forward(item: Any) -> bool:
                try:
                    trio.from_thread.run(send.send, item, trio_token=trio_token)
                    return True
                except (trio.RunFinishedError, trio.Cancelled, trio.BrokenResourceError, trio.ClosedResourceError):
                    return False

            def pump() -> None:
                try:
                    for ev in call:
                        if ev.WhichOneof("event") == "exit":
                            exited.append(True)
                        if not forward(ev):
                            call.cancel()
                            return
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                        err = translate(exc)
                        self._note(err)
                        forward(err)  # errors travel in-band: the consumer raises them
                finally:
                    try:
                        trio.from_thread.run_sync(send.close, trio_token=trio_token)
                    except trio.RunFinishedError:
                        pass

            def done(_: Any) -> None:
                try:
                    trio_token.run_sync_soon(finished.set)
                except trio.RunFinishedError:
                    pass

            trio.lowlevel.start_thread_soon(pump, done, name="lens-executor-stream")
            try:
                yield recv
            finally:
                # Closed first: a pump waiting to hand over an event nobody reads any more (the
                # consumer left with the channel full, as an abort whose reading ran out of time
                # does) gives up at once and cancels the call, so the wait below does not last.
                # (Closed without a checkpoint: in a cancelled block, ``aclose`` would raise before
                # the call is cancelled.)
                recv.close()
                if exited and not finished.is_set():
                    # The executor gives back the command's slot as its handler ends, just after
                    # the exit it sent: the stream's own end says it has. Cancelling at once freed
                    # this client's slot a moment before the executor's, and a command sent in
                    # that moment was refused TOO_MANY_COMMANDS. (Bounded: a stream that does not
                    # end is cancelled as before.)
                    with trio.CancelScope(shield=True), trio.move_on_after(EXIT_END_WAIT_S):
                        await finished.wait()
                call.cancel()
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await finished.wait()


async def stop_answer(client: ExecutorClient, run_id: str, timeout: float) -> pb.StopReply:
    """The executor's answer to a ``Stop`` by ``run_id`` (a call whose caller gave up, or a
    command's run id) within ``timeout`` s (:meth:`ExecutorClient.stop`): ``found`` false or
    ``ended``, it has ended, and ``call`` carries an editing call's reply when it completed (from
    the executor's call journal). Whatever the ``Stop`` fails with is raised as
    :class:`ExecutorUnavailable` (its deadline passing as :class:`ExecutorTimeout`, a refused
    connection with status ``UNAVAILABLE``; an executor built before ``Stop``, a closed channel's
    ``ValueError``, named in the message): a caller tells "not confirmed" by one error, and none
    crashes on a failure it did not foresee."""
    try:
        return await client.stop(run_id, timeout)
    except ExecutorUnavailable:
        raise
    except Exception as exc:  # (a closed channel's ValueError too)
        raise ExecutorUnavailable(getattr(exc, "message", None) or repr(exc),
                                  status=getattr(exc, "status", "")) from exc
