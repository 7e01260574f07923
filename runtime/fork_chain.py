"""A session's chain of forks (F-ACT-7), walked back from the session to the first one.

Each fork's ``session.created`` names its source and the fork point; a fork's state, its depth,
the seqs it inherited and the edits it inherited are all read along that chain. The walk is
bounded by the chain's length, each link once: a log may hold a chain longer than
``MAX_FORK_DEPTH`` (made before that limit), and only an edited log holds one that loops, which
ends the walk where it comes back."""

from __future__ import annotations

from typing import Any, NamedTuple

from events import types as t


class ForkLink(NamedTuple):
    """One fork of a chain: ``session_id`` was made from ``forked_from_session`` as of its event
    ``forked_from_seq`` (as its ``session.created`` recorded it)."""

    session_id: str
    forked_from_session: str
    forked_from_seq: int | None


class ForkChain:
    """The links of ``session_id``'s chain of forks, the session's own first: an async iterator
    reading each link's first event when that link is asked for (a walk that stops early reads
    no further). It ends at a session that is no fork, or whose source it already passed. A log
    error reading a link's first event is raised from the step that reads it."""

    def __init__(self, store: Any, session_id: str) -> None:
        self._store = store
        self._next: str | None = session_id
        self._seen = {session_id}

    def __aiter__(self) -> ForkChain:
        return self

    async def __anext__(self) -> ForkLink:
        session_id, self._next = self._next, None
        if session_id is None:
            raise StopAsyncIteration
        first = await self._store.read_events(session_id=session_id, limit=1)
        ev = first[0].event if first else None
        if not isinstance(ev, t.SessionCreated) or not ev.forked_from_session or ev.forked_from_session in self._seen:
            raise StopAsyncIteration
        self._seen.add(ev.forked_from_session)
        self._next = ev.forked_from_session
        return ForkLink(session_id, ev.forked_from_session, ev.forked_from_seq)
