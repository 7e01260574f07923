"""Sessions at scale (F-ACT-2, F-ACT-7): what grows with a chain of forks is bounded per link.

The chains here are recorded through the real store as the actor records a fork (one
``session.created`` naming its source and fork point), with no snapshot of any link: what a
wake-up meets after a new snapshot version or a deleted ``projections.db``. Work is counted in
store reads, never timed."""

from __future__ import annotations

import sys
from typing import Any

import apsw
import pytest
import trio

from events import types as t
from events.store import Draft, EventStore
from projections.history import HistoryIndex
from projections.projector import open_projections_db
from runtime.projection_service import ProjectionService
from runtime.actor import SessionActor
from runtime.http_parts import STATUS
from runtime.errors import MAX_FORK_DEPTH, ForkPointInvalid, ForkTooDeep
from runtime.fork_chain import ForkChain, ForkLink


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
    the session was quarantined. It is a loop now, reading a bounded number of times per link.
    (Such a chain can no longer be made by forking, past MAX_FORK_DEPTH; it can still be in a log,
    and the walk is the same for any depth.)"""
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
        # ... and it runs: an input to the last link is answered after the chain's contexts.
        st = await rt.run_to_idle(chain[-1], "d1", "deep")
        assert [it.text for it in st.agents["main"].items] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]


async def test_a_search_filtered_by_a_fork_deep_in_a_chain_is_one_statement_of_fixed_size(runtime_factory, data_dir,
                                                                                         autojump_clock):
    """A search filtered by a fork carried one SQL condition per source of the fork: past ~1,000
    links SQLite refused the statement (its expression depth limit), and the route answered that
    projections.db could not be read, telling the user to delete it. The statement is the same
    at any depth now; checked here under a limit of 100 on a chain of 200."""
    depth = 200
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello quokka")
        chain = await chain_of_forks(rt, src, depth)
    store = EventStore.open(data_dir)
    service = ProjectionService(store.data_dir, store)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            await nursery.start(service.run)  # (started once its first catch-up is done)
            nursery.cancel_scope.cancel()
    finally:
        service.close()
        store.close()
    conn = open_projections_db(data_dir)
    try:
        conn.limit(apsw.SQLITE_LIMIT_EXPR_DEPTH, 100)
        index = HistoryIndex(conn)
        for sid in (chain[0], chain[-1]):
            hits, _next = index.search("p1", "quokka", session_id=sid)
            assert sorted((h.session_id, h.role) for h in hits) == [(sid, "assistant"), (sid, "user")]
    finally:
        conn.close()


async def test_a_fork_past_the_deepest_chain_is_refused_with_nothing_created(runtime_factory, autojump_clock):
    """There was no bound on forks of forks, while what follows a chain grows with it (the
    history lineage with its square: 500,500 rows for 1,000 links). A fork of a session
    MAX_FORK_DEPTH forks deep is FORK_TOO_DEEP (HTTP 409) and records nothing; one less deep
    is made as before."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        chain = await chain_of_forks(rt, src, MAX_FORK_DEPTH)
        before = rt.store.last_seq
        with pytest.raises(ForkTooDeep) as caught:
            await rt.sup.fork_session(chain[-1], await rt.store.session_last_seq(chain[-1]))
        assert caught.value.code == "FORK_TOO_DEEP" and STATUS["FORK_TOO_DEEP"] == 409
        assert repr(chain[-1]) in str(caught.value) and str(MAX_FORK_DEPTH) in str(caught.value)
        assert rt.store.last_seq == before
        fork = await rt.sup.fork_session(chain[-2], await rt.store.session_last_seq(chain[-2]))
        st = await rt.run_to_idle(fork, "d1", "deep")
        assert [it.text for it in st.agents["main"].items] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]


async def forked_from(rt, session_id: str) -> tuple[str | None, int | None]:
    """The source and fork point ``session_id``'s ``session.created`` names."""
    [first] = await rt.store.read_events(session_id=session_id, limit=1)
    assert isinstance(first.event, t.SessionCreated)
    return first.event.forked_from_session, first.event.forked_from_seq


async def test_the_depth_of_a_fork_at_an_inherited_seq_counts_from_the_session_it_is_made_from(runtime_factory,
                                                                                              autojump_clock):
    """A fork at a seq its source inherited is made from the session that recorded it: the depth
    limit counts from that one, not from the session named in the route. With a chain of
    MAX_FORK_DEPTH forks, its last link (too deep to fork at an event of its own) is forked at
    the source's last seq (made from the source) and at its own source's ``session.created``
    (made from that link, one less deep)."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        chain = await chain_of_forks(rt, src, MAX_FORK_DEPTH)
        src_last = await rt.store.session_last_seq(src)
        made = await rt.sup.fork_session(chain[-1], src_last)
        assert await forked_from(rt, made) == (src, src_last)
        _, at = await forked_from(rt, chain[-1])  # (chain[-2]'s session.created)
        made = await rt.sup.fork_session(chain[-1], at)
        assert await forked_from(rt, made) == (chain[-2], at)
        st = await rt.run_to_idle(made, "d1", "deep")
        assert [it.text for it in st.agents["main"].items] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]


async def test_a_fork_at_an_item_inherited_through_a_chain_longer_than_the_limit_is_made_from_its_session(
        runtime_factory, autojump_clock):
    """A chain longer than MAX_FORK_DEPTH, made before that limit, can be in a log. Its last link's
    view shows the first source's items; a fork there at one of their seqs was 422 "seq N is not
    an event of session <the link>": the walk to the session that recorded it stopped after
    MAX_FORK_DEPTH links. It walks the whole chain now (each link once)."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        chain = await chain_of_forks(rt, src, MAX_FORK_DEPTH + 40)
        src_last = await rt.store.session_last_seq(src)
        made = await rt.sup.fork_session(chain[-1], src_last)
        assert await forked_from(rt, made) == (src, src_last)
        st = await rt.run_to_idle(made, "d1", "deep")
        assert [it.text for it in st.agents["main"].items] == [
            "hello", "(faux) You said: hello", "deep", "(faux) You said: deep"]
        # A damaged log's chain that loops (two sessions naming each other) ends the walk: refused.
        await rt.store.append(*[
            Draft(t.SessionCreated(model="faux/faux", forked_from_session=other, forked_from_seq=src_last + 10**6),
                  project_id="p1", session_id=sid, agent_id="main")
            for sid, other in (("loop_a", "loop_b"), ("loop_b", "loop_a"))])
        with pytest.raises(ForkPointInvalid, match=f"seq {src_last} is not an event of session 'loop_a'"):
            await rt.sup.fork_session("loop_a", src_last)


async def test_a_chain_of_forks_is_walked_back_one_read_per_link_and_ends_where_it_loops(runtime_factory,
                                                                                         autojump_clock):
    """The one walk of a chain of forks (a fork's state, its depth, the seqs and edits it
    inherited): its links from the session back, each read when asked for, each once."""
    async with runtime_factory() as rt:
        src = await rt.session()
        await rt.run_to_idle(src, "r1", "hello")
        chain = await chain_of_forks(rt, src, 5)
        src_last = await rt.store.session_last_seq(src)
        links = [link async for link in ForkChain(rt.store, chain[-1])]
        assert links == [ForkLink(chain[i], chain[i - 1] if i else src, src_last + i) for i in reversed(range(5))]
        assert [link async for link in ForkChain(rt.store, src)] == []  # (no fork)
        reads = CountingReads(rt.store)
        async for link in ForkChain(rt.store, chain[-1]):
            break
        assert reads.calls == 1 and link.session_id == chain[-1]
        await rt.store.append(*[
            Draft(t.SessionCreated(model="faux/faux", forked_from_session=other, forked_from_seq=1),
                  project_id="p1", session_id=sid, agent_id="main")
            for sid, other in (("loop_a", "loop_b"), ("loop_b", "loop_a"))])
        assert [link async for link in ForkChain(rt.store, "loop_a")] == [ForkLink("loop_a", "loop_b", 1)]
