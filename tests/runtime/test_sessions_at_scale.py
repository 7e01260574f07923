"""Sessions at scale (F-ACT-2, F-ACT-7): what grows with a chain of forks is bounded per link.

The chains here are recorded through the real store as the actor records a fork (one
``session.created`` naming its source and fork point), with no snapshot of any link: what a
wake-up meets after a new snapshot version or a deleted ``projections.db``. Work is counted in
store reads, never timed."""

from __future__ import annotations

import sys
from typing import Any

import trio

from events import types as t
from events.store import Draft
from runtime.actor import SessionActor


async def chain_of_forks(rt, source: str, depth: int) -> list[str]:
    """``depth`` forks, each made of the last at its ``session.created`` (the first at
    ``source``'s last event), appended in batches; their seqs follow one another (gap-free)."""
    chain: list[str] = []
    cur, upto = source, await rt.store.session_last_seq(source)
    while len(chain) < depth:
        batch: list[Draft] = []
        for i in range(min(250, depth - len(chain))):
            sid = f"fork_{len(chain) + i:05d}"
            batch.append(Draft(t.SessionCreated(model="faux/faux", forked_from_session=cur, forked_from_seq=upto + i),
                               project_id="p1", session_id=sid, agent_id="main"))
            cur = sid
        res = await rt.store.append(*batch)
        assert list(res.seqs) == list(range(upto + 1, upto + 1 + len(batch)))
        chain += [d.session_id for d in batch]
        upto = res.seqs[-1]
    return chain


class CountingReads:
    """Counts the store's reads of events (and passes them on)."""

    def __init__(self, store: Any) -> None:
        self.calls = 0
        self._read = store.read_events
        store.read_events = self

    async def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return await self._read(*args, **kw)


async def test_a_deep_chain_of_forks_wakes_without_snapshots(runtime_factory, autojump_clock):
    """A wake-up with no snapshot walked the chain of forks back by recursion: past the
    interpreter's recursion limit (1,200 links here) the actor crashed on every wake-up and
    the session was quarantined. It is a loop now, reading a bounded number of times per link."""
    depth = sys.getrecursionlimit() + 200
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        chain = await chain_of_forks(rt, src, depth)
        reads = CountingReads(rt.store)
        # The actor's own load, as a wake-up runs it (read directly: the crash it was loops).
        send, recv = trio.open_memory_channel[Any](0)
        send.close()
        try:
            last = await SessionActor(chain[-1], rt.deps, recv).load_state()
        except RecursionError:
            raise AssertionError("the chain of forks was walked back by recursion") from None
        finally:
            recv.close()
        assert [it.text for it in last.agents["main"].items] == ["hello", "(faux) You said: hello"]
        assert last.session_id == chain[-1] and last.created and not last.quarantined
        # Per link: its first event, its (short) tail and the empty page that ends it; the same
        # at any depth.
        assert reads.calls <= 3 * (depth + 1) + 5, reads.calls
        assert await rt.state(chain[-1]) == last  # (the actor: a wake-up)
        # ... and the fork of a fork far down the chain answers (its source read the same way).
        fork = await rt.sup.fork_session(chain[-1], await rt.store.session_last_seq(chain[-1]))
        st = await rt.run_to_idle(fork, "d1", "deep")
        assert [it.text for it in st.agents["main"].items] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]
