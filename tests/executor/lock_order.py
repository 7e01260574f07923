"""Two writes of one execution domain, the second sent while the first holds the domain's write
lock: how each ended, and how long the second took. The tests of the lock held past a write's
own end (a given-up edit, a command whose stream was left) run their calls through it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import trio

from runtime.executors import ExecutorPool
from tools.base import ToolError

from .conftest import until


class Behind(NamedTuple):
    first: Any  # the first call's result, or the ToolError it raised; None: its caller was cancelled
    second: Any  # the second's result (or its ToolError)
    took: float  # the second's time from its start to its end (trio's clock)


async def second_behind_first(pool: ExecutorPool, first: Callable[[], Awaitable[Any]],
                              second: Callable[[], Awaitable[Any]], *,
                              first_holds: Callable[[trio.CancelScope], Awaitable[None]],
                              while_waiting: Callable[[trio.CancelScope, Any], Awaitable[None]],
                              project: str = "p", within: float = 30) -> Behind:
    """Run ``first()`` in a cancel scope and, once ``first_holds(scope)`` has returned (it waits
    until the first holds the domain's write lock; it may cancel the first through ``scope``),
    ``second()``; once the second waits for the lock (asserted: it has not run),
    ``while_waiting(scope, lock)``. Both calls have ended when it returns, within ``within``."""
    results: dict[str, Any] = {}
    cancel = trio.CancelScope()

    async def run_first() -> None:
        with cancel:
            try:
                results["first"] = await first()
            except ToolError as exc:
                results["first"] = exc

    async def run_second() -> None:
        start = trio.current_time()
        try:
            results["second"] = await second()
        except ToolError as exc:
            results["second"] = exc
        results["took"] = trio.current_time() - start

    with trio.fail_after(within):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_first)
            await first_holds(cancel)
            lock = (await pool.get(project)).lock
            nursery.start_soon(run_second)
            # (either the second waits for the lock, or, were it let go, it has run)
            await until(lambda: lock._writers_waiting or "second" in results)
            assert "second" not in results  # (the first holds the lock)
            await while_waiting(cancel, lock)
    return Behind(results.get("first"), results["second"], results["took"])
