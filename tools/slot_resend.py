"""A command the executor refused for its command slots, sent again until one frees.

The executor runs at most so many commands at once; one more is refused ``TOO_MANY_COMMANDS``
before anything of it runs. ``run_command`` and a background job's start both send it again
for a while (:func:`resend_while_slots_full`) rather than fail at once: another client of the
executor may hold the slots, or one freed a moment ago is still counted by the executor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from .rerun import EXECUTOR_FAILURES

SLOT_RETRY_S = 0.1  # how often a command the executor refused TOO_MANY_COMMANDS is sent again

T = TypeVar("T")


async def resend_while_slots_full(attempt: Callable[[float], Awaitable[T]], *, wait_s: float,
                                  until: float | None, untouched: Callable[[], bool],
                                  gave_up: Callable[[], Exception]) -> T:
    """Run ``attempt`` (one sending of a command to the executor), sending it again every
    :data:`SLOT_RETRY_S` while it is refused ``TOO_MANY_COMMANDS`` with nothing of it run
    (``untouched()``: no output came; the refusal comes before anything runs): all the
    executor's command slots are taken, by this client's streams or another client's, and one
    freed a moment ago may still be counted by the executor (it frees a cancelled stream's slot
    after Core does). ``attempt`` gets how long it may still wait for the client's own slot.

    ``until``: when the resends end (``trio.current_time()``'s clock); None counts ``wait_s``
    from the first refusal (a job's start, which waits for the client's slot with no bound).
    The last attempt comes at the end, not a whole :data:`SLOT_RETRY_S` past it; a refusal
    then raises ``gave_up()``. Any other failure is raised as it is."""
    while True:
        left = wait_s if until is None else max(0.0, until - trio.current_time())
        try:
            return await attempt(left)
        except EXECUTOR_FAILURES as exc:
            if getattr(exc, "code", None) != "TOO_MANY_COMMANDS" or not untouched():
                raise
            if until is None:
                until = trio.current_time() + wait_s
            if trio.current_time() >= until:
                raise gave_up() from None
            await trio.sleep(min(SLOT_RETRY_S, until - trio.current_time()))
