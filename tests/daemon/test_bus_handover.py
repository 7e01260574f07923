"""The bus takes committed events from the store's acknowledgement, and from the log when it falls behind."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing

from events.store import Draft, open_store
from events.types import InstructionAppended
from runtime.bus import Bus


def note(text: str, session: str = "s1") -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, project_id="p")


async def test_every_event_once_in_order_whether_handed_over_or_read_back(tmp_path: Path) -> None:
    async with open_store(tmp_path / "data") as store:
        await store.append(note("before the bus"))  # already committed: not sent live
        bus = Bus(store, inbox_max=5)
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            sub = bus.subscribe()
            one_session = bus.subscribe(session_id="s2")
            for i in range(3):  # handed over by the store
                await store.append(note(f"a{i}"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            assert bus.log_reads == 0  # nothing read back from the log
            # one group of 12 events: more than the inbox holds, so the bus reads the log for them
            await store.append(*[note(f"b{i}", session="s2" if i % 2 else "s1") for i in range(12)])
            for i in range(2):
                await store.append(note(f"c{i}"))
            with trio.fail_after(10):
                while bus.position < store.last_seq:
                    await trio.sleep(0.001)
            assert bus.log_reads >= 1  # the overflowing group came from the log
            bus.flush()
            data = sub.take() or b""
            s2 = one_session.take() or b""
            nursery.cancel_scope.cancel()
    ids = [int(x) for x in re.findall(rb"^id: (\d+)$", data, re.M)]
    assert ids == list(range(2, 19))  # seq 1 was committed before the bus started
    texts = re.findall(rb'"text":"([^"]+)"', data)
    assert texts == [f"a{i}".encode() for i in range(3)] + [f"b{i}".encode() for i in range(12)] + [b"c0", b"c1"]
    assert [int(x) for x in re.findall(rb"^id: (\d+)$", s2, re.M)] == [5 + i for i in range(12) if i % 2]
