"""What each agent's open model request has streamed so far.

Text deltas are not in the log (the committed ``model.responded`` carries the whole answer), so a
stream that joins in the middle of an answer — a page opened mid-answer, a dashboard resuming
after a drop or a daemon restart — would see only the deltas sent after it joined. The bus keeps,
per ``(session, agent)``, the deltas of the request its last ``model.requested`` opened, and a
joining stream gets them first as ``model.partial`` frames: the whole text (and reasoning) so far,
which *replaces* what the client holds for that agent. Live deltas then append to it.

Pure bookkeeping, driven by the bus in its order of frames: :meth:`StreamedSoFar.note_events` for
committed events, :meth:`StreamedSoFar.note_delta` for each delta, :meth:`StreamedSoFar.frames_for`
when a stream joins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import msgspec

from events.reader import StoredEvent

_json = msgspec.json.Encoder()

# Past this many characters (text and reasoning together) an answer's partial is no longer kept:
# a joining stream then gets no partial for it, as before there were partials. A committed answer
# cannot be larger than an event, so this bounds the memory of every open request.
MAX_PARTIAL_CHARS = 1024 * 1024

# Committed kinds that close the agent's open request (its streamed text is then in the log, or void).
_CLOSES_AGENT = frozenset({"model.responded", "model.failed", "task.finished", "agent.finished"})
# ... and those that close every open request of the session.
_CLOSES_SESSION = frozenset({"run.aborted", "session.deleted", "session.quarantined"})


@dataclass(slots=True)
class _Open:
    project_id: str | None
    complete: bool = True  # False: some of its deltas were not seen in order; it is not offered
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    chars: int = 0


class StreamedSoFar:
    def __init__(self, max_chars: int = MAX_PARTIAL_CHARS) -> None:
        self.max_chars = max_chars
        self._open: dict[tuple[str, str], _Open] = {}
        # (session, agent) -> the last seq committed when one of its deltas was offered ahead of
        # the bus's committed events: a model.requested up to there may be the one those deltas
        # belong to (seen after them), so it opens an incomplete request.
        self._unsure: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._open)

    def note_events(self, events: Iterable[StoredEvent]) -> None:
        """Committed events, in ``seq`` order, as the bus offers them."""
        for se in events:
            sid, kind = se.session_id, se.kind
            if sid is None:
                continue
            if kind in _CLOSES_SESSION:
                for key in {k for k in (*self._open, *self._unsure) if k[0] == sid}:
                    self._close(key, se.seq)
                continue
            if se.agent_id is None:
                continue
            key = (sid, se.agent_id)
            if kind == "model.requested":
                unsure = self._unsure.get(key, 0)
                if se.seq > unsure:
                    self._unsure.pop(key, None)
                self._open[key] = _Open(se.project_id, complete=se.seq > unsure)
            elif kind in _CLOSES_AGENT:
                self._close(key, se.seq)

    def _close(self, key: tuple[str, str], seq: int) -> None:
        self._open.pop(key, None)
        if seq > self._unsure.get(key, seq):  # past the deltas seen out of order: forget them
            del self._unsure[key]

    def note_delta(self, session_id: str, agent_id: str, kind: str, text: str, *,
                   in_order: bool, committed: int) -> None:
        """A delta as the bus offers it. ``in_order``: every event committed before it (its
        ``model.requested`` included) was offered first; otherwise ``committed`` is the log's
        last seq at that moment."""
        key = (session_id, agent_id)
        entry = self._open.get(key)
        if not in_order:
            self._unsure[key] = max(self._unsure.get(key, 0), committed)
            if entry is not None:
                entry.complete = False
            return
        if entry is None or not entry.complete:
            return
        entry.chars += len(text)
        if entry.chars > self.max_chars:
            entry.complete = False
            entry.text.clear()
            entry.reasoning.clear()
            return
        parts = entry.reasoning if kind == "reasoning" else entry.text
        parts.append(text)
        # Many small deltas, few strings: each part is kept under half the one before it (merging
        # the last two otherwise), so a request holds O(log n) strings and each character is
        # copied O(log n) times.
        while len(parts) > 1 and 2 * len(parts[-1]) >= len(parts[-2]):
            last = parts.pop()
            parts[-1] += last

    def frames_for(self, session_id: str | None, project_id: str | None) -> Iterator[bytes]:
        """The data of each ``model.partial`` frame a stream with this filter gets
        on joining, per agent with an open request: its reasoning (if any streamed), then its
        text (always, ``""`` when none streamed yet: the client then knows it missed nothing)."""
        for (sid, agent_id), entry in self._open.items():
            if not entry.complete or (session_id is not None and sid != session_id) or (
                    project_id is not None and entry.project_id != project_id):
                continue
            for kind, parts in (("reasoning", entry.reasoning), ("text", entry.text)):
                if parts or kind == "text":
                    yield _json.encode({"session_id": sid, "agent_id": agent_id, "kind": kind,
                                             "text": "".join(parts)})
