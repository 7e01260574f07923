"""Pieces shared by the suite's Hypothesis state machines over the real runtime
(test_session_machine.py: one session; test_sessions_machine.py: several sessions).

:class:`HeldModel` is the machines' model: every request waits until a rule lets it go with the
turn that rule drew. :class:`Host` opens, restarts and closes the machine's runtime from a task of
the test's nursery (the machine runs in a worker thread). :class:`RuntimeMachine` is the machines'
common base: an example's data directory and runtime, the log read as it grows, the teardown that
checks the projections. :func:`pick` draws one of a list that
depends on the runtime's state the same way whatever it holds. The checks: :func:`log_is_gap_free`
and :func:`projections_equal_a_rebuild`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import msgspec
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from conftest import Runtime, open_runtime
from events.reader import LogReader, StoredEvent
from projections.projector import Projector, open_projections_db
from projections.registry import all_projections
from runtime.errors import LensError
from runtime.providers.base import Delta, ModelRequest, ModelResult, UsageMeter
from runtime.providers.faux import FauxProvider, FauxTurn
from runtime.working_context import Compact
from tests.idgen import IdGen


class HeldModel:
    """The machine's model: a request waits until :meth:`answer` lets it go with a turn.

    ``received`` keeps every request it was sent, in the order they came."""

    def __init__(self, id: str = "faux") -> None:
        self.id = id
        self._waiting: list[tuple[trio.Event, list[FauxTurn], ModelRequest]] = []
        self.received: list[ModelRequest] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def requests(self) -> list[ModelRequest]:
        """The requests waiting, oldest first."""
        return [slot[2] for slot in self._waiting]

    async def stream(self, request: ModelRequest, on_delta: Callable[[Delta], None],
                     meter: UsageMeter | None = None) -> ModelResult:
        slot: tuple[trio.Event, list[FauxTurn], ModelRequest] = (trio.Event(), [], request)
        self.received.append(request)
        self._waiting.append(slot)
        try:
            await slot[0].wait()
        finally:
            self._waiting = [s for s in self._waiting if s is not slot]
        (turn,) = slot[1]
        return await FauxProvider(self.id, [turn]).stream(request, on_delta, meter)

    def answer(self, turn: FauxTurn, request: ModelRequest | None = None) -> None:
        """Let the oldest waiting request (or ``request``, one of :attr:`requests`) go, answered
        with ``turn`` (its ``when`` matches all)."""
        slot = self._waiting[0] if request is None else next(s for s in self._waiting if s[2] is request)
        self._waiting = [s for s in self._waiting if s is not slot]
        slot[1].append(msgspec.structs.replace(turn, when=""))
        slot[0].set()


@dataclass
class Host:
    """Opens, restarts and closes the machine's runtime from a task of the test's nursery (the
    machine runs in a worker thread; a runtime's nurseries are entered and left by one task).

    ``options(model)``: more keyword arguments of ``open_runtime`` for a runtime whose model is
    ``model`` (snapshot cadence, idle timeout, tools...)."""

    nursery: trio.Nursery
    clock: trio.testing.MockClock
    token: trio.lowlevel.TrioToken
    root: Path  # (each example's data directory is made in it)
    options: Callable[[HeldModel], dict[str, Any]] = lambda model: {}
    rt: Runtime | None = None
    model: HeldModel | None = None
    errors: list[logging.LogRecord] = field(default_factory=list)  # what the runtime logged as an error
    stopping: trio.Event = field(default_factory=trio.Event)
    _stop: trio.Event = field(default_factory=trio.Event)
    _done: trio.Event = field(default_factory=trio.Event)

    async def open(self, data_dir: Path, ids: IdGen) -> Runtime:
        """``ids``: the example's, shared across its restarts (as the daemon's ids never repeat)."""
        self._stop, self._done, self.stopping = trio.Event(), trio.Event(), trio.Event()
        self.model = HeldModel()
        stop, done, model = self._stop, self._done, self.model

        async def own(task_status: trio.TaskStatus[Runtime] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                async with open_runtime(data_dir, faux=model, ids=ids,  # type: ignore[arg-type]
                                        stopping=self.stopping, projections=True, **self.options(model)) as rt:
                    task_status.started(rt)
                    await stop.wait()
            finally:
                done.set()

        self.rt = await self.nursery.start(own)
        return self.rt

    async def close(self) -> None:
        """A graceful stop: the daemon's stop event first (a compaction under way is cut off and
        answered), then the runtime closed."""
        self.stopping.set()
        self._stop.set()
        await self._done.wait()
        self.rt = None

    async def start_compaction(self, session_id: str) -> "Pending":
        """``Compact`` sent from a task of its own, answered into the :class:`Pending` returned."""
        assert self.rt is not None
        rt, pending = self.rt, Pending()

        async def compact() -> None:
            try:
                pending.answer = await rt.call(session_id, Compact(stop=self.stopping))
            except LensError as exc:
                pending.answer = exc
            pending.done = True

        self.nursery.start_soon(compact)
        await trio.testing.wait_all_tasks_blocked()  # (refused at once, or its request sent)
        return pending

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self.token)


@dataclass
class Pending:
    done: bool = False
    answer: Any = None


def pick(data: st.DataObject, choices: list[Any]) -> Any:
    """One of ``choices`` (which depend on the runtime's state), drawn the same way whatever they
    are: Hypothesis replays a run's draws and must meet the same kinds of draw."""
    return choices[data.draw(st.integers(0, 255), label="index") % len(choices)]


def trio_sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def run(*args: Any) -> Any:
        return fn(*args)

    return run


class Errors(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


def log_is_gap_free(events: list[StoredEvent], session_ids: Iterable[str]) -> None:
    """The global ``seq`` and each of ``session_ids``' ``session_seq`` count 1, 2, 3... (F-LOG-1)."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for sid in session_ids:
        mine = [e.session_seq for e in events if e.session_id == sid]
        assert mine == list(range(1, len(mine) + 1)), sid


def projections_equal_a_rebuild(data_dir: Path) -> None:
    """The projections kept up to date (caught up to the log's end) equal a rebuild from the log
    alone (the runtime is stopped)."""
    with LogReader(data_dir) as reader:
        projector = Projector(reader, open_projections_db(data_dir), all_projections())
        try:
            projector.catch_up()
            kept = {name: projector.dump(name) for name in projector.projections}
            projector.rebuild()
            assert kept == {name: projector.dump(name) for name in projector.projections}
        finally:
            projector.close()


class RuntimeMachine(RuleBasedStateMachine):
    """What both machines begin with: an example's own data directory and the runtime the host
    opened on it (``ids`` shared across its restarts), the log read on as it grows
    (:meth:`events`), and a teardown that stops the runtime and checks that the projections it
    kept up to date equal a rebuild from the log."""

    host: Host  # (set on the subclass the test makes)

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="example-", dir=self.host.root))
        self.data_dir = self.dir / "data"
        self.ids = IdGen()
        self.host.errors.clear()
        self.rt = self.host.run(self.host.open, self.data_dir, self.ids)
        self._events: list[StoredEvent] = []

    def teardown(self) -> None:
        try:
            if self.host.rt is not None:
                self.host.run(self.host.close)
                projections_equal_a_rebuild(self.data_dir)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def events(self) -> list[StoredEvent]:
        """The whole log (read on from what was read before: it only grows)."""

        async def go() -> list[StoredEvent]:
            while True:
                after = self._events[-1].seq if self._events else 0
                page = await self.rt.store.read_events(after=after, limit=1000)
                if not page:  # (a page may be cut short by its byte budget)
                    return list(self._events)
                self._events.extend(page)

        return self.host.run(go)


async def run_machine(machine: type[RuntimeMachine], host: Host, max_examples: int, steps: int) -> None:
    """Run ``machine`` over ``host`` in a worker thread (its rules call into trio through the
    host), with what the runtime logs as an error collected into ``host.errors``."""
    bound = type("Machine", (machine,), {"host": host})
    handler = Errors(host.errors)
    logging.getLogger("lens").addHandler(handler)
    try:
        await trio.to_thread.run_sync(lambda: run_state_machine_as_test(
            bound, settings=settings(max_examples=max_examples, stateful_step_count=steps)))
    finally:
        logging.getLogger("lens").removeHandler(handler)
