"""Core's sends are ordered (``SendOrder``: its pool's epoch and a sequence shared by Calls and
Stops), so the executor tells a send made before a ``Stop`` from one made after it on purpose.

A call Core runs again under its id on purpose (``rerun``: a restart's re-run, the second run
on a respawned child) is not refused for a ``Stop`` that gave up an earlier send. When that
re-run is itself given up and its ``Stop`` overtakes it, the mark alone let it run (and write
beside the next write): now a send of the ``Stop``'s epoch whose sequence is below the
``Stop``'s is refused ``CANCELLED``, marked or not. Sends of another epoch (another Core
process) or with no order (a Core built before it) keep the mark's rule, as before. A ``Stop``
stops a call running under its id unless Core sent that call after it; a pool's clients all
take their places from one order.

Everything is real: the module's executor process over gRPC (raw requests with the orders a
test chooses), and Core's pool and workspace tools behind a relay holding a call on its way.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import trio

from proto import executor_pb2 as pb
from proto import executor_pb2_grpc as pb_grpc
from runtime.executor_client import SendOrder
from tools.executor import PROTOCOL_VERSION
from tools.executor.runs import STOPPED_IDS_KEEP_S, STOPPED_IDS_MOST, StoppedIds
from tests.executor_hold import held_at

from .conftest import (ExecutorProcess, poll_until, remote_pool, running_pool, start_executor, stop_process, tool_ctx,
                       tools_by_name, until)
from .relay import Holding, Relay, give_up_held
from .test_commands import BOUND_S
from .test_stop_before_its_call import REFUSED_EDIT

E, F = 0x5EED_0000_0000_0001, 0xF00D_0000_0000_0002  # two Core processes' epochs
Order = tuple[int, int] | None


@contextmanager
def stub_of(executor: ExecutorProcess) -> Iterator[tuple[pb_grpc.ExecutorStub, tuple[tuple[str, str], ...]]]:
    """A raw stub of ``executor`` and the metadata its calls carry; its channel closed on leaving."""
    channel = grpc.insecure_channel(executor.address)
    try:
        yield pb_grpc.ExecutorStub(channel), (("authorization", f"Bearer {executor.token}"),
                                              ("lens-protocol", str(PROTOCOL_VERSION)))
    finally:
        channel.close()


@pytest.fixture
def stub(executor: ExecutorProcess) -> Iterator[tuple[pb_grpc.ExecutorStub, tuple[tuple[str, str], ...]]]:
    with stub_of(executor) as s:
        yield s


def _order(order: Order) -> dict[str, Any]:
    return {} if order is None else {"order": pb.SendOrder(epoch=order[0], seq=order[1])}


def stop(stub: Any, call_id: str, order: Order) -> None:
    stub[0].Stop(pb.StopRequest(run_id=call_id, **_order(order)), metadata=stub[1], timeout=BOUND_S)


def creating(call_id: str, *, rerun: bool, order: Order) -> pb.ToolRequest:
    """An ``edit_file`` creating a file named after ``call_id`` (:func:`created_name`), sent as
    Core would with ``rerun`` and ``order``."""
    return pb.ToolRequest(tool="edit_file", call_id=call_id, rerun=rerun, arguments_json=json.dumps(
        {"path": created_name(call_id), "mode": "create", "content": call_id}), **_order(order))


def created_name(call_id: str) -> str:
    return call_id.replace(":", "_") + ".txt"


def written(reply: pb.ToolReply, workspace: Path, call_id: str, refused: str = REFUSED_EDIT) -> str:
    """What :func:`creating`'s call did: its error code (nothing written; its message ``refused``),
    or "written" (the file checked)."""
    name = created_name(call_id)
    if not reply.ok:
        assert not (workspace / name).exists()  # (refused before anything: nothing written)
        assert reply.error_message == refused
        return reply.error_code
    assert (workspace / name).read_text() == call_id
    return "written"


def create(stub: Any, workspace: Path, call_id: str, *, rerun: bool, order: Order) -> str:
    """:func:`creating`'s call sent and answered: its error code, or "written" (:func:`written`)."""
    reply = stub[0].Call(creating(call_id, rerun=rerun, order=order), metadata=stub[1], timeout=BOUND_S)
    return written(reply, workspace, call_id)


def test_a_marked_send_made_before_a_stop_of_its_epoch_is_refused_and_one_made_after_it_runs(
        stub: Any, workspace: Path) -> None:
    stop(stub, "ses_o:before", (E, 5))
    assert create(stub, workspace, "ses_o:before", rerun=True, order=(E, 4)) == "CANCELLED"  # (the Stop overtook it)
    stop(stub, "ses_o:after", (E, 5))
    assert create(stub, workspace, "ses_o:after", rerun=True, order=(E, 6)) == "written"  # (sent after it, on purpose)
    # unmarked, a send after a Stop is still refused: only Core's re-runs are marked
    stop(stub, "ses_o:unmarked", (E, 5))
    assert create(stub, workspace, "ses_o:unmarked", rerun=False, order=(E, 6)) == "CANCELLED"
    # a later Stop of the same epoch moves the line; an earlier one arriving late does not move it back
    stop(stub, "ses_o:twice", (E, 5))
    stop(stub, "ses_o:twice", (E, 9))
    stop(stub, "ses_o:twice", (E, 7))
    assert create(stub, workspace, "ses_o:twice", rerun=True, order=(E, 8)) == "CANCELLED"
    assert create(stub, workspace, "ses_o:twice", rerun=True, order=(E, 10)) == "written"


@pytest.mark.parametrize("stop_order, send_order", [
    ((E, 5), (F, 1)),  # another Core process's re-run (a daemon restarted): not ordered against the Stop
    (None, (E, 1)),  # a Stop from a Core built before the order
    ((E, 5), None),  # a re-run from a Core built before the order
    (None, None),  # both: as before
])
def test_a_marked_send_not_ordered_against_the_stop_runs_and_an_unmarked_one_is_refused(
        stub: Any, workspace: Path, stop_order: Order, send_order: Order) -> None:
    case = f"ses_p:{stop_order is None:d}{send_order is None:d}"
    stop(stub, f"{case}m", stop_order)
    assert create(stub, workspace, f"{case}m", rerun=True, order=send_order) == "written"
    stop(stub, f"{case}u", stop_order)
    assert create(stub, workspace, f"{case}u", rerun=False, order=send_order) == "CANCELLED"


@pytest.mark.parametrize("stop_order, outcome", [
    ((E, 5), "written"),  # a late Stop, made before the call running: it gave up an earlier send, not this one
    ((E, 7), "CANCELLED"),  # made after it: it gives this call up
    ((F, 9), "CANCELLED"),  # another epoch's: not ordered against it, stopped as before
    (None, "CANCELLED"),  # a Stop from a Core built before the order: as before
])
def test_a_stop_reaches_a_running_call_only_when_it_was_not_made_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_order: Order, outcome: str) -> None:
    # A Stop handled after Core's wait for it ran out, while a re-run Core made after it runs
    # under the id (received, held before its look whether its caller waits): the Stop stopped
    # it all the same, and it wrote nothing. Now a running call of the Stop's epoch with a higher
    # seq is not the Stop's to stop: the Stop answers found false, and the call writes.
    held = held_at(monkeypatch, tmp_path, "call:edit_file")
    executor = start_executor(tmp_path / "remote")
    try:
        with stub_of(executor) as stub:
            running = stub[0].Call.future(creating("ses_l:c1", rerun=True, order=(E, 6)), metadata=stub[1],
                                          timeout=BOUND_S)
            assert poll_until(held.exists, BOUND_S)
            reply = stub[0].Stop(pb.StopRequest(run_id="ses_l:c1", **_order(stop_order)), metadata=stub[1],
                                 timeout=BOUND_S)
            Path(f"{tmp_path / 'hold'}.release").write_text("")  # the held call goes on
            assert written(running.result(BOUND_S), executor.workspace, "ses_l:c1", refused=(
                "ses_l_c1.txt: the caller went away before the edit was written; nothing was changed")) == outcome
        assert reply.found == (outcome == "CANCELLED")  # (stopped: found, and ended as it wrote nothing)
    finally:
        stop_process(executor.proc)


async def test_a_rerun_given_up_whose_stop_overtakes_it_is_refused_and_a_later_one_runs(
        executor: ExecutorProcess, tmp_path: Path) -> None:
    # Core's own path: an edit given up while its Call is on its way (held by the relay), then
    # its session's re-run of it (marked), given up the same way: its Stop overtakes it too. Both
    # are refused when they come; the re-run after that runs, and writes once.
    ws = executor.workspace
    (ws / "o.txt").write_text("a\n")
    args = {"path": "o.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "ab"}]}
    replies: list[pb.ToolReply] = []

    def seen(reply: pb.ToolReply) -> pb.ToolReply:
        replies.append(reply)
        return reply

    holding = Holding(lambda request: request.tool == "edit_file")
    with Relay(executor.address, before_call=holding, edit_reply=seen) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address) as pool:
            edit = tools_by_name(pool, tmp_path / "artifacts")["edit_file"]

            def run(rerun: bool) -> Any:
                return edit.run(args, tool_ctx("ses_q", "c1", rerun=rerun))

            with trio.fail_after(30):
                await give_up_held(lambda: run(False), holding)
                await until(lambda: len(replies) == 1)
                await give_up_held(lambda: run(True), holding)
                await until(lambda: len(replies) == 2)
                refused = (False, "CANCELLED", REFUSED_EDIT)
                assert [(r.ok, r.error_code, r.error_message) for r in replies] == [refused, refused]
                assert (ws / "o.txt").read_text() == "a\n"
                again = await run(True)
    assert not again.is_error, again.content
    assert again.structured_content["changed"] is True
    assert (ws / "o.txt").read_text() == "ab\n"  # written once
    # each Stop was ordered after the send it gave up, in one epoch
    assert len(relay.stop_orders) == 2 and all(o is not None for o in relay.stop_orders)
    assert relay.stop_orders[0][0] == relay.stop_orders[1][0] and relay.stop_orders[0][1] < relay.stop_orders[1][1]


def test_a_send_order_keeps_one_epoch_and_counts_its_sends_from_one() -> None:
    order = SendOrder()
    first, second = order.next(), order.next()
    assert first.epoch == second.epoch != 0 and (first.seq, second.seq) == (1, 2)
    assert SendOrder().epoch != order.epoch  # (random: another process's pool, another epoch)


async def test_the_clients_of_a_pools_projects_take_their_sends_from_one_order(
        executor: ExecutorProcess, tmp_path: Path) -> None:
    # Two projects on the remote executor: a client each, their sends counted in one sequence of
    # one epoch, as they reach the executor (each client counting its own, a Stop of one could
    # not be ordered against a send of the other after a reconnect).
    sent: list[tuple[int, int]] = []

    def seen(request: pb.ToolRequest) -> None:
        sent.append((request.order.epoch, request.order.seq))

    ws = executor.workspace
    with Relay(executor.address, before_call=seen) as relay:
        async with remote_pool(executor, tmp_path / "executors", address=relay.address,
                               workspaces={"p": ws, "q": ws}) as pool:
            p, q = await pool.get("p"), await pool.get("q")
            assert p.client is not q.client
            with trio.fail_after(BOUND_S):
                for ex in (p, q, p, q):
                    await ex.client.call("read_file", {"path": "."})
    epoch = sent[0][0]
    assert epoch != 0 and sent == [(epoch, seq) for seq in range(sent[0][1], sent[0][1] + 4)]


async def test_a_respawned_childs_client_goes_on_with_its_pools_order(tmp_path: Path) -> None:
    # A local child killed and spawned again: the new child's client counts on from the last
    # send of the one before, in the same epoch, not from 1 in an epoch of its own.
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        with trio.fail_after(BOUND_S):
            first = await pool.get("p")
            assert first.process is not None
            await first.client.call("read_file", {"path": "."})  # seq 1
            first.process.kill()
            await first.process.wait()
            again = await pool.get("p")
            assert again is not first and again.client is not first.client
            await again.client.call("read_file", {"path": "."})  # seq 2
        epoch = first.client.order.next().epoch  # (seq 3)
        assert again.client.order.next() == pb.SendOrder(epoch=epoch, seq=4)


def test_stopped_ids_keep_the_last_stops_order_per_id() -> None:
    ids = StoppedIds(clock=lambda: 0.0)
    ids.remember("s:a", (E, 5))
    assert ids.sent_before("s:a", (E, 4)) and not ids.sent_before("s:a", (E, 5))
    assert not ids.sent_before("s:a", (F, 1)) and not ids.sent_before("s:a", None)
    assert not ids.sent_before("s:b", (E, 1))  # (never named)
    ids.remember("s:a", (E, 3))  # (an earlier Stop of the epoch, late: the line stays)
    assert ids.sent_before("s:a", (E, 4))
    ids.remember("s:a", (F, 2))  # (another epoch's Stop: its line is the one kept)
    assert ids.sent_before("s:a", (F, 1)) and not ids.sent_before("s:a", (E, 4))
    ids.remember("s:a")  # (a Stop with no order: no line, the mark decides)
    assert "s:a" in ids and not ids.sent_before("s:a", (F, 1))


def test_a_registry_of_stopped_ids_stays_within_its_stated_memory_as_ids_come_and_go() -> None:
    # 4096 ids of any length, each with its Stop's order (the epoch a fresh int per request, as
    # protobuf gives it), then 8 times as many more, the oldest dropped as each comes: stated in
    # docs/executor.md and runs.py as about 970 KiB a registry (its table, rebuilt as ids come and
    # go, twice the size it had when first full: 761 KiB only while it first fills), 1.25 MiB
    # for a moment while the table is rebuilt.
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        ids = StoppedIds()
        kept: list[int] = []
        n = 0
        for _ in range(9):
            for _ in range(STOPPED_IDS_MOST):
                ids.remember(f"ses_{n:08d}:call_{n}" * 4, (E + n, 2**40 + n))
                n += 1
            kept.append(tracemalloc.get_traced_memory()[0] - start)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert len(ids) == STOPPED_IDS_MOST
    assert max(kept) <= 1000 * 1024 and peak <= 1300 * 1024, (kept, peak)
    assert STOPPED_IDS_KEEP_S == 120.0
