"""The live event bus behind SSE: committed events, in ``seq`` order, fanned out to subscribers.

One task follows the store (woken by each commit), reads the new events once, encodes each as an
SSE frame once, and offers it to every matching subscriber without ever waiting: a subscriber
whose bounded buffer is full is cut off (it gets a final ``stream.dropped`` event naming the last
``seq`` it received, and can resume from there). So a slow client never slows the writer or
other clients. Ephemeral frames (streaming deltas) carry no ``id`` and are not in the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from events.reader import StoredEvent
from events.store import EventStore

_json = msgspec.json.Encoder()
READ_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Frame:
    seq: int | None
    project_id: str | None
    session_id: str | None
    data: bytes  # the whole SSE message, ready to write


def event_frame(se: StoredEvent) -> Frame:
    return Frame(se.seq, se.project_id, se.session_id, sse_message(se.kind, _json.encode(se.to_json()), se.seq))


def sse_message(event: str, data: bytes, id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\n".encode() + b"data: " + data + b"\n\n"


@dataclass(eq=False)
class Subscription:
    session_id: str | None
    project_id: str | None
    send: trio.MemorySendChannel[Frame]
    recv: trio.MemoryReceiveChannel[Frame]
    start: int  # frames with seq <= start are not delivered live: read them from the log
    dropped: bool = False

    def matches(self, f: Frame) -> bool:
        if self.session_id is not None and f.session_id != self.session_id:
            return False
        if self.project_id is not None and f.project_id != self.project_id:
            return False
        return True


@dataclass
class Bus:
    store: EventStore
    buffer: int = 2048
    position: int = 0
    subscribers: set[Subscription] = field(default_factory=set)
    delivered: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.position = self.store.last_seq
        task_status.started()
        while True:
            await self.store.wait_for(self.position)
            while self.position < self.store.last_seq:
                batch = await self.store.read_events(after=self.position, limit=READ_BATCH)
                if not batch:
                    break
                self._offer_all([event_frame(se) for se in batch])
                self.position = batch[-1].seq

    def subscribe(self, session_id: str | None = None, project_id: str | None = None) -> Subscription:
        send, recv = trio.open_memory_channel[Frame](self.buffer)
        sub = Subscription(session_id, project_id, send, recv, self.position)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)
        sub.send.close()

    def publish(self, session_id: str | None, project_id: str | None, event: str, data: dict[str, Any]) -> None:
        """An ephemeral frame (no id, not in the log), e.g. a streaming text delta."""
        self._offer(Frame(None, project_id, session_id, sse_message(event, _json.encode(data))))

    def _offer(self, frame: Frame) -> None:
        self._offer_all([frame])

    def _offer_all(self, frames: list[Frame]) -> None:
        """Offer ``frames`` (in order) to every subscriber, never waiting.

        The same outcome as offering them one by one: each subscriber gets the frames it matches
        in order until its buffer is full; a full buffer drops it (a missed delta does not), and
        a dropped or closed subscriber gets nothing more. Looping subscriber by subscriber keeps
        the per-frame work to a bound method call (the fan-out's hot loop).
        """
        delivered = 0
        for sub in list(self.subscribers):
            send_nowait = sub.send.send_nowait
            sid, pid = sub.session_id, sub.project_id
            for frame in frames:
                if (sid is not None and frame.session_id != sid) or (pid is not None and frame.project_id != pid):
                    continue
                try:
                    send_nowait(frame)
                    delivered += 1
                except trio.WouldBlock:
                    if frame.seq is None:
                        continue  # a missed delta is harmless: the final event carries the text
                    sub.dropped = True
                    self.subscribers.discard(sub)
                    sub.send.close()
                    break
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.subscribers.discard(sub)
                    break
        self.delivered += delivered
