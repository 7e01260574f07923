"""``runtime.stop_now.StopNow``: the graceful stop's bounded waits, ended at once by a second
stop signal (virtual time: ``autojump_clock``)."""

from __future__ import annotations

import trio

from runtime.stop_now import StopNow


async def test_a_grace_ends_at_its_bound_when_nothing_sets_it(autojump_clock: trio.abc.Clock):
    now = StopNow()
    start = trio.current_time()
    with now.grace(3) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught and trio.current_time() - start == 3


async def test_set_ends_the_graces_open_and_those_opened_after(autojump_clock: trio.abc.Clock):
    now = StopNow()
    ended: list[float] = []
    start = trio.current_time()

    async def wait(seconds: float) -> None:
        with now.grace(seconds):
            await trio.sleep_forever()
        ended.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, 3)
        nursery.start_soon(wait, 10)
        await trio.sleep(1)
        assert not now.is_set()
        now.set()
    assert ended == [1, 1] and now.is_set()
    with now.grace(3) as later:  # (opened after: ends at once)
        await trio.sleep_forever()
    assert later.cancelled_caught and trio.current_time() - start == 1


async def test_a_shielded_grace_ignores_the_outer_cancel_but_not_set(autojump_clock: trio.abc.Clock):
    now = StopNow()
    start = trio.current_time()
    done: list[float] = []

    async def cleanup() -> None:
        with trio.CancelScope() as outer:
            outer.cancel()  # (a stop's cleanup runs cancelled)
            with now.grace(5, shield=True):
                await trio.sleep_forever()
            done.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cleanup)
        await trio.sleep(2)
        assert done == []  # the outer cancel did not reach it
        now.set()
    assert done == [2]
