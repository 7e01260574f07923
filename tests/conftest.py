"""Shared fixtures of the Lens test suite.

Store harnesses: the event-store contract suite (tests/events/test_store_contract.py) runs
against every entry of ``STORE_HARNESSES``. A harness knows how to open one implementation
(and reopen it on the same durable location) and how to read what it holds; to run the contract
against another implementation (an in-memory fake, say), add a harness class here and its name to
``STORE_HARNESSES``. The fake must then pass exactly the same tests.

Hypothesis: the ``lens`` profile (default) is derandomized, keeps no example database and has no
deadline, so CI runs are deterministic on slow machines. Set ``HYPOTHESIS_PROFILE=explore`` to
search with fresh random examples locally.
"""

from __future__ import annotations

import gc
import os
import signal
import time
import warnings
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import trio
from hypothesis import HealthCheck, settings

from events.reader import LogReader
from events.store import EventStore, open_store
from tests.procfs import CLOCK_TICKS, Proc, children, command_line
from tests.rawlog import log_with_its_wal

settings.register_profile(
    "lens",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, database=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lens"))

# The files tests write (configs, workspaces) take their modes from the umask, and `lens serve`
# refuses a config file or directory others can change: a runner whose umask is 002 (a
# user-private-group default) would see every such start refused. The suite runs under 022, the
# usual default, whatever the runner's (its subprocesses inherit it).
os.umask(0o022)


# The variables that give the built-in providers a key or a base URL (runtime/providers/builtin.py):
# a daemon started on embedded defaults with the key of whoever runs the suite would take a real
# provider as its default model and send it requests. Cleared for the whole run, so that every
# daemon the suite starts (in process, or as a child inheriting this environment) has none unless
# a test gives it one.
BUILTIN_PROVIDER_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


def pytest_configure(config: pytest.Config) -> None:
    for name in BUILTIN_PROVIDER_ENV:
        os.environ.pop(name, None)


class SqliteStoreHarness:
    """The real store: ``events.db`` (apsw, WAL, synchronous=FULL) in a temporary directory."""

    name = "sqlite"

    def __init__(self, root: Path) -> None:
        self.data_dir = root / "data"

    def open(self, **options: Any) -> AbstractAsyncContextManager[EventStore]:
        """Open (or reopen) the store on the same location, its writer running."""
        return open_store(self.data_dir, **options)

    def reader(self, **options: Any) -> LogReader:
        """An independent reader of what the store committed."""
        return LogReader(self.data_dir, **options)


STORE_HARNESSES: dict[str, Callable[[Path], Any]] = {
    "sqlite": SqliteStoreHarness,
}


@pytest.fixture(params=sorted(STORE_HARNESSES))
def store_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return STORE_HARNESSES[request.param](tmp_path)


@pytest.fixture
async def store(store_harness: Any) -> Any:
    """An open store with its writer running; closed (queue drained) after the test."""
    async with store_harness.open() as s:
        yield s


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory path that does not exist yet (``EventStore.open`` creates it)."""
    return tmp_path / "data"


@pytest.fixture(scope="session")
def wal_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], bytes]:
    """``wal_of(n)``: the ``events.db-wal`` of a log whose ``n`` commits are all still in it
    (:func:`tests.rawlog.log_with_its_wal`), made once for each ``n`` a session asks for."""
    made: dict[int, bytes] = {}

    def wal(commits: int) -> bytes:
        if commits not in made:
            root = tmp_path_factory.mktemp(f"wal{commits}")
            trio.run(log_with_its_wal, root / "writer", root / "copy", commits)
            made[commits] = (root / "copy" / "events.db-wal").read_bytes()
        return made[commits]

    return wal


# Leaks (a child still running, an unclosed pipe, socket or pidfd): ``filterwarnings = error``
# in pyproject.toml makes every ResourceWarning an error, whoever raises it, and pytest reports
# one raised in a finalizer (PytestUnraisableExceptionWarning) in the test running when the
# object was collected. An object in a reference cycle (an exception holding its traceback's
# frames) is collected by a later full collection, so that may be another test. Collecting after
# every test would pin each leak on its test, but a full collection of this suite's heap took
# 230 ms a test (median; 52 s of a 98 s run of three files), so it is not done by default:
# LENS_TEST_GC_EACH=1 does it, for finding the test that leaked (with PYTHONTRACEMALLOC=20, the
# warning also says where the object was made).
GC_EACH_TEST = os.environ.get("LENS_TEST_GC_EACH", "") not in ("", "0")


@pytest.fixture(autouse=True)
def _collected_after_each_test() -> Iterator[None]:
    """With ``LENS_TEST_GC_EACH=1``, a full collection once the test's other fixtures are torn
    down (an autouse fixture is set up first, so torn down last): what it leaked warns, and
    fails, in its own teardown, not in a later test."""
    yield
    if GC_EACH_TEST:
        gc.collect()


# Children left running: a test that starts a process (a daemon, an executor, an MCP server, a
# command's reaper) must have it ended by the time its fixtures are torn down. Every test's live
# children (``/proc/self/task/*/children``, zombies left out) are compared before and after it; a
# child still there once the test's own fixtures are torn down fails the test's teardown, naming
# its command line, and is ended (SIGTERM, then SIGKILL) so the tests after it start clean. A
# child that is ending is given CHILD_END_WAIT_S to go (polled; nothing is waited for when none is
# new). Children of module- or session-scoped fixtures are set up before the test's and so are in
# "before". Its cost: two reads of one /proc file per thread of the test process (and one per
# child), 0.05 ms with one thread, 1.3 ms with thirty (measured here); nothing is waited for
# unless a child is new.
CHILD_END_WAIT_S = 5.0


def _children_until_gone(which: Callable[[Proc], bool], wait_s: float) -> dict[int, Proc]:
    """The live children ``which`` picks, polled until there are none or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    while True:
        left = {pid: p for pid, p in children().items() if which(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def _end_children(pids: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        pids = set(_children_until_gone(lambda p: p.pid in pids, CHILD_END_WAIT_S))
        if not pids:
            return


@pytest.fixture(autouse=True)
def _no_child_left_running() -> Iterator[None]:
    """Fails a test that leaves a child process of the test process running (see above)."""
    # (the kernel's children lists are read while they may change, so one can be missed: a child
    # started before the test, by a wider-scoped fixture, is told apart by its start time too)
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - 1 / CLOCK_TICKS
    before = set(children())
    yield
    left = _children_until_gone(lambda p: p.pid not in before and p.started >= since, CHILD_END_WAIT_S)
    if left:
        _end_children(set(left))
        pytest.fail("a child process was left running: " + "; ".join(
            f"pid {pid}: {command_line(p)}" for pid, p in sorted(left.items())), pytrace=False)


def _interrupted(exc: BaseException | None) -> bool:
    """Whether ``exc`` holds a KeyboardInterrupt (trio raises a Ctrl-C that lands in a
    test inside the exception group of the nurseries it crosses)."""
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Stop the run after a test a Ctrl-C (``timeout -s INT``) reached inside trio, and keep a
    failing Hypothesis test a plain failure instead of an INTERNALERROR.

    Pytest stops at a bare KeyboardInterrupt; one inside an exception group it takes for that
    test's failure, and the run went on to its end. Stopping through ``session.shouldstop`` runs
    the teardowns (the module's executors, daemons) as any interrupted run does.

    On failure Hypothesis' own makereport hook imports ``hypothesis.extra._patching`` (libcst),
    which imports ``mypy_extensions.TypedDict`` and warns DeprecationWarning; under
    ``filterwarnings = error`` that aborts the whole session. Import it here first, quietly.
    (The cleaner fix is an ``ignore:mypy_extensions.TypedDict is deprecated`` line in
    pyproject's filterwarnings.)
    """
    if getattr(item, "_hypothesis_failing_examples", None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                import hypothesis.extra._patching  # noqa: F401
            except ImportError:
                pass
    if call.excinfo is not None and _interrupted(call.excinfo.value):
        item.session.shouldstop = f"KeyboardInterrupt in {item.nodeid}"
    yield
