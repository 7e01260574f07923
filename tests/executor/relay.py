"""A gRPC relay in front of a real executor process that records the tools Core calls.

Tests that must know which calls reach the executor (how many round trips a Core tool makes)
point Core at the relay instead of the executor: every RPC is passed on as raw bytes, token and
protocol metadata included, and each ``Call``'s tool name is recorded on the way. ``edit_reply``
may rewrite an editing tool's reply on its way back (an executor of an older build, say), on the
wire: Core's code runs unchanged. ``before_run`` is called with each ``Run`` request before it
is passed on (a test changes the workspace exactly between Core's calls), ``before_call`` with
each ``Call`` request (a test holds one back: a call still on its way). ``missing`` names
methods the relay does not have, which grpc answers UNIMPLEMENTED (an executor built before them).
``withhold_exit`` keeps each ``Run`` stream's exit from Core, the stream held open until Core
leaves it (an exit lost on its way, while ``Stop`` still answers with it). ``run_failures`` lists
how the executor refused or failed each ``Run`` that did not end well (``"CODE details"``), even
one whose caller had gone by then. ``cut_run`` cuts the first ``Run`` stream once a first output
has been passed on, before the command's exit: ``"unavailable"`` fails it as a connection lost
does (grpc UNAVAILABLE), ``"end"`` ends it as if all was sent; the executor's call is cancelled
either way, as Core leaving it would. ``stops`` lists the run id of each ``Stop`` Core sent, in
order, and ``stops_answered`` each whose executor's answer came back (on its way to Core);
while ``hold_stop`` is set (or says so of its run id), a ``Stop`` is held there, never passed on nor answered, until
Core leaves it (an executor that does not answer), or at most :data:`HOLD_BOUND_S` of real time:
then it fails ABORTED and ``held_past`` is set, so a Core that sent no deadline (a test whose
trio clock stands still cannot end the wait) fails the test rather than hanging it. ``stop_orders`` lists each ``Stop``'s
``order`` (None when it has none). ``stop_reply`` may rewrite a ``Stop``'s reply on its way back
(an executor built before one of its fields). :class:`Holding` is a ``before_call`` that holds a
chosen ``Call`` on its way while a test gives its caller up (:func:`give_up_held`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable
from concurrent import futures
from typing import Any, Callable, Iterator, Literal

import grpc
import trio

from proto import executor_pb2 as pb
from runtime.executors import DomainLock

from .conftest import until

PASSED_METADATA = ("authorization", "lens-protocol")
# Real time a held Stop waits for Core to leave it: far past any bound the tests set for Core
# (5 s at most), short of the executor tests' BOUND_S (15 s).
HOLD_BOUND_S = 10.0


class Relay(grpc.GenericRpcHandler):
    """``with Relay(executor_address) as relay``: ``relay.address`` takes Core's calls,
    ``relay.tools`` lists the tools called, in order."""

    def __init__(self, target: str, *, edit_reply: Callable[[pb.ToolReply], pb.ToolReply] | None = None,
                 before_run: Callable[[pb.CommandRequest], None] | None = None,
                 before_call: Callable[[pb.ToolRequest], None] | None = None,
                 missing: tuple[str, ...] = (), withhold_exit: bool = False,
                 cut_run: Literal["unavailable", "end"] | None = None,
                 hold_stop: bool | Callable[[str], bool] = False,
                 stop_reply: Callable[[pb.StopReply], pb.StopReply] | None = None) -> None:
        self.target = target
        self.edit_reply = edit_reply
        self.before_run = before_run
        self.before_call = before_call
        self.missing = missing
        self.withhold_exit = withhold_exit
        self.cut_run = cut_run
        self.hold_stop = hold_stop
        self.stop_reply = stop_reply
        self.stops: list[str] = []
        self.stops_answered: list[str] = []
        self.stop_orders: list[tuple[int, int] | None] = []
        self.held_past = False
        self._runs = 0
        self.tools: list[str] = []
        self.run_failures: list[str] = []
        self._channel = grpc.insecure_channel(target)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[self])
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"

    def __enter__(self) -> "Relay":
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None).wait()
        self._channel.close()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        if method.rsplit("/", 1)[-1] in self.missing:
            return None

        def metadata(context: grpc.ServicerContext) -> list[tuple[str, str]]:
            return [(m.key, m.value) for m in context.invocation_metadata() if m.key in PASSED_METADATA]

        if method.endswith("/Run"):
            def stream(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                if self.before_run is not None:
                    self.before_run(pb.CommandRequest.FromString(raw))
                self._runs += 1
                cut = self.cut_run if self._runs == 1 else None
                call = self._channel.unary_stream(method)(raw, metadata=metadata(context),
                                                          timeout=context.time_remaining())
                context.add_callback(call.cancel)  # (Core leaving the stream ends it on the executor)
                try:
                    for event in call:
                        if self.withhold_exit and pb.CommandEvent.FromString(event).WhichOneof("event") == "exit":
                            while context.is_active():  # (held open, the exit never sent)
                                time.sleep(0.05)
                            return
                        yield event
                        if cut is not None and pb.CommandEvent.FromString(event).WhichOneof("event") != "exit":
                            call.cancel()
                            if cut == "unavailable":
                                context.abort(grpc.StatusCode.UNAVAILABLE, "the connection was lost (cut by the relay)")
                            return
                except grpc.RpcError as exc:
                    self.run_failures.append(f"{exc.code().name} {exc.details()}")  # type: ignore[attr-defined]
                    context.abort(exc.code(), exc.details() or "")  # type: ignore[attr-defined]

            return grpc.unary_stream_rpc_method_handler(stream)

        def unary(raw: bytes, context: grpc.ServicerContext) -> Any:
            if method.endswith("/Stop"):
                stop = pb.StopRequest.FromString(raw)
                self.stops.append(stop.run_id)
                self.stop_orders.append((stop.order.epoch, stop.order.seq) if stop.HasField("order") else None)
                if self.hold_stop is True or (callable(self.hold_stop) and self.hold_stop(stop.run_id)):
                    until = time.monotonic() + HOLD_BOUND_S
                    while context.is_active():  # (held: never answered while Core waits)
                        if time.monotonic() >= until:
                            self.held_past = True
                            context.abort(grpc.StatusCode.ABORTED, f"held past the relay's {HOLD_BOUND_S:g} s")
                        time.sleep(0.05)
                    return pb.StopReply().SerializeToString()
            request = pb.ToolRequest.FromString(raw) if method.endswith("/Call") else None
            tool = request.tool if request is not None else None
            if request is not None:
                self.tools.append(request.tool)
                if self.before_call is not None:
                    self.before_call(request)
            try:
                reply = self._channel.unary_unary(method)(raw, metadata=metadata(context),
                                                          timeout=context.time_remaining())
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")  # type: ignore[attr-defined]
            if tool in ("edit_file", "patch_file", "restore") and self.edit_reply is not None:
                reply = self.edit_reply(pb.ToolReply.FromString(reply)).SerializeToString()
            if method.endswith("/Stop"):
                self.stops_answered.append(pb.StopRequest.FromString(raw).run_id)
                if self.stop_reply is not None:
                    reply = self.stop_reply(pb.StopReply.FromString(reply)).SerializeToString()
            return reply

        return grpc.unary_unary_rpc_method_handler(unary)


class Holding:
    """A relay's ``before_call``: once :meth:`arm`ed, the next ``Call`` that ``which`` picks is
    held on the relay's thread (``held`` set) until :meth:`let_go`: a call still on its way to the
    executor. Each :meth:`arm` holds one more."""

    def __init__(self, which: Callable[[pb.ToolRequest], bool]) -> None:
        self.which = which
        self.held = threading.Event()
        self._go = threading.Event()
        self._armed = False

    def arm(self) -> None:
        self.held.clear()
        self._go.clear()
        self._armed = True

    def let_go(self) -> None:
        self._go.set()

    def __call__(self, request: pb.ToolRequest) -> None:
        if self._armed and self.which(request):
            self._armed = False
            self.held.set()
            assert self._go.wait(20)


async def give_up_held(run: Callable[[], Awaitable[Any]], holding: Holding, lock: DomainLock | None = None) -> None:
    """Run ``run()`` (a Core tool sending an editing ``Call``), the call held by ``holding`` on
    its way, and cancel it there; once its caller is gone (Core's ``Stop`` by the call's id was
    answered and the lock let go: given ``lock``, its domain's, its write side is taken and let go
    then, as the domain's next write would), let the ``Call`` go on: it reaches the executor after
    its ``Stop``. Bounded: 20 s."""
    cancel = trio.CancelScope()
    outcome: list[bool] = []

    async def given_up() -> None:
        with cancel:
            await run()
        outcome.append(cancel.cancelled_caught)

    holding.arm()
    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(given_up)
                await until(holding.held.is_set, 20)  # (the relay's thread holds it)
                cancel.cancel()
            assert outcome == [True]  # (given up: no result)
            if lock is not None:
                async with lock.write():  # (let go: the domain's next write may begin)
                    pass
    finally:
        holding.let_go()
