"""The live event bus behind SSE: committed events, in ``seq`` order, fanned out to subscribers.

One task follows the store: the store hands it each committed group as it acknowledges it
(``EventStore.on_commit``: the events as stored, no read-back and no decode; the log is read only
if the bus falls behind or sees a gap in ``seq``), and it encodes each event as an SSE frame
once. Frames are not pushed to each subscriber one by one: subscribers with the same filter
(unfiltered, one session, one project) share a :class:`Group`, and the bus appends each matching
frame to the group's pending list — work per *group*, not per subscriber. A ticker flushes every
group at most once per :attr:`Bus.tick` seconds (the first frame after a quiet spell at once;
less often when fanning out would take more than :data:`FANOUT_SHARE` of the event loop): the
pending frames are joined into **one** bytes object (a :class:`Chunk`, shared by every
subscriber of the group), and every subscriber gets everything pending in one write. A stream
whose task is parked (waiting, nothing in flight) and which has a direct socket
writer (``runtime.sse_socket``) is written by the ticker itself, without waking its task;
otherwise the ticker sets the subscriber's ``wake`` and its task takes and writes the chunks.

The bus never waits on a subscriber: a subscriber that has still not taken more than ``buffer``
frames flushed in earlier ticks (one tick's burst does not count against it) is cut off (it gets a final ``stream.dropped`` event naming the last ``seq`` it was sent, and can
resume from there). So a slow client never slows the writer or other clients. Ephemeral frames
(streaming deltas) carry no ``id`` and are not in the log.

The frame of a large event (past :data:`FRAME_OFF_LOOP_CHARS`, by :func:`event_chars`) is made in a
worker thread a piece at a time (``pieces.encode_in_pieces``); the frames offered after it
wait in the bus's queue until it is made, so every stream gets its frames in the order offered.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

import msgspec
import trio

from events.errors import CorruptEvent
from events.reader import StoredEvent
from events.secrets import Secrets
from events.store import EventStore, TailReader

from . import pieces
from .json_chars import ESCAPE_MAX, PIECES_FROM_CHARS
from .json_lines import json_line
from .pieces import encode_in_pieces
from .streamed import StreamedSoFar

_json = msgspec.json.Encoder()
log = logging.getLogger("lens.bus")

READ_BATCH = 1000
# Why a stream was cut off (the reason its stream.dropped gives): it fell behind, the bus's queue
# behind a large event's frame overflowed, or the bus could not read an event back from the log.
DROP_SLOW = "the client did not keep up; resume with Last-Event-ID"
DROP_QUEUE = "the server's queue of frames behind a large event overflowed; resume with Last-Event-ID"
DROP_DAMAGED = "the live stream could not read an event back from the log; resume with Last-Event-ID"
# A subscriber this many bytes behind is cut off (stream.dropped) as one too many frames behind
# is: what a slow client pins in memory is bounded by size too (events may be up to 1 MiB).
BUFFER_BYTES = 32 * 1024 * 1024
INBOX_MAX_EVENTS = 10_000  # handed-over events waiting for the bus's task; past this it reads the log
# Frames waiting in the bus's queue behind a large event's frame being made: past this many (or
# this many bytes, a frame still to be made counting its event_chars) every stream is cut off
# (stream.dropped) and resumes from the log.
QUEUE_MAX_FRAMES = 10_000
QUEUE_MAX_BYTES = BUFFER_BYTES
TICK_SECONDS = 0.02  # at most one write per subscriber per tick, carrying everything pending
WRITE_SLICE_SECONDS = 0.01  # direct writes for this long at most between two checkpoints of the ticker
FANOUT_SHARE = 0.25  # the fan-out's bound on the event loop's time: stretches the tick if needed
MAX_TICK_SECONDS = 0.08  # ... but never beyond this
TRIM_CHUNKS = 32  # a group forgets chunks every subscriber has taken once it holds more than this
# An event whose body's strings hold more characters than this has its frame made in a worker
# thread, a piece at a time (below it, on the loop in one call: a frame of 4 Mi characters of
# ASCII takes a few milliseconds, where the thread's hop and the pieces' walk cost more than they
# free). The threshold of a JSON answer's pieces, for the same trade, over the most characters of
# JSON one character can become (json_chars.ESCAPE_MAX, a control character): the strings are not
# read for their escapes on this path, so a frame made on the loop is never past the threshold.
FRAME_OFF_LOOP_CHARS = PIECES_FROM_CHARS // ESCAPE_MAX
# event_chars walks at most this many values; an event of more counts as large. Walking a value
# costs about twice what encoding it does, so the bound keeps the walk below the frame it decides
# for an event of many values (1,000 values: 18 us of walk against 29 us of frame; 1,000 nodes
# walked took 67 us).
COUNT_NODES = 200
# A frame of at least this many bytes is never joined with others into one bytes object on the
# loop (a chunk of its own, taken alone): copying 32 MB there took 20-28 ms (a fresh allocation).
ALONE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Frame:
    seq: int | None
    project_id: str | None
    session_id: str | None
    data: bytes  # the whole SSE message, ready to write


def event_frame(se: StoredEvent, secrets: Secrets) -> Frame:
    """``se`` as an SSE frame, scrubbed of ``secrets`` (it may have been stored before them)."""
    return Frame(se.seq, se.project_id, se.session_id, sse_message(se.kind, secrets.encode(se.to_json(), _json.encode), se.seq))


def event_chars(se: StoredEvent) -> int:
    """About how many characters the strings of ``se``'s body hold (a bytes value counts its
    length): a walk of at most :data:`COUNT_NODES` values, past which the event counts as large
    (``FRAME_OFF_LOOP_CHARS + 1``). Its cost is the number of values, never their size."""
    todo: list[object] = [se.event]
    chars = nodes = 0
    while todo:
        value = todo.pop()
        nodes += 1
        if nodes > COUNT_NODES:
            return FRAME_OFF_LOOP_CHARS + 1
        if isinstance(value, (str, bytes)):
            chars += len(value)
        elif isinstance(value, msgspec.Struct):
            todo.extend([getattr(value, name) for name in value.__struct_fields__])
        elif isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, (list, tuple)):
            todo.extend(value)
    return chars


def event_frame_in_pieces(se: StoredEvent, secrets: Secrets) -> Frame:
    """:func:`event_frame`'s frame, byte for byte, made a piece at a time: for a worker thread
    (no single call in it holds the interpreter's lock long, and it lets go of it after each
    chunk). The chunks of ``encode_in_pieces`` end between two characters, so the line breaks
    :func:`json_line` escapes are whole in one chunk."""
    chunks, _ = encode_in_pieces(se.to_json(), secrets)
    parts = [f"id: {se.seq}\nevent: {se.kind}\n".encode(), b"data: "]
    for chunk in chunks:
        parts.append(json_line(chunk))
        pieces.give_way()  # (looked up at each call: the benches' --variant replaces it)
    parts.append(b"\n\n")
    return Frame(se.seq, se.project_id, se.session_id, b"".join(parts))


async def made_frame(se: StoredEvent, secrets: Secrets, *, off_loop_chars: int = FRAME_OFF_LOOP_CHARS) -> Frame:
    """``se``'s frame: on the loop up to ``off_loop_chars`` (:func:`event_chars`), in a worker
    thread past it. An error making it is raised here as :func:`event_frame` raises it."""
    if _frame_on_loop(se, off_loop_chars):
        return event_frame(se, secrets)
    return await trio.to_thread.run_sync(event_frame_in_pieces, se, secrets)


def _frame_on_loop(se: StoredEvent, off_loop_chars: int = FRAME_OFF_LOOP_CHARS) -> bool:
    """Whether ``se``'s frame is made on the loop (else in a worker thread): see :func:`event_chars`."""
    return event_chars(se) <= off_loop_chars


def sse_message(event: str, data: bytes, id: int | None = None) -> bytes:
    """One SSE message; ``data`` is JSON, written as one line for any reader of lines (its
    U+0085, U+2028 and U+2029 escaped, as ``lens log decode`` prints them: see json_lines)."""
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\n".encode() + b"data: " + json_line(data) + b"\n\n"


@dataclass(eq=False, slots=True)
class _Unmade:
    """A large event whose frame a worker thread is to make; the frames after it wait for it."""

    se: StoredEvent
    chars: int  # its event_chars: what it counts in the queue's bytes until its frame is made


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive frames of one group, flushed together: ``data`` is their bytes joined."""

    data: bytes
    frames: tuple[Frame, ...]
    last_seq: int | None  # the last logged seq among the frames (None: only ephemeral frames)
    frames_end: int = 0  # the group's frames_total once this chunk was flushed
    bytes_end: int = 0  # ... and its bytes_total


@dataclass(eq=False)
class Group:
    """The subscribers sharing one filter, and the frames they have yet to take."""

    session_id: str | None
    project_id: str | None
    pending: list[Frame] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    base: int = 0  # absolute index of chunks[0]
    frames_total: int = 0  # frames ever flushed into chunks (for each subscriber's backlog)
    bytes_total: int = 0  # bytes ever flushed into chunks (the same, by size)
    subs: set["Subscription"] = field(default_factory=set)
    # Chunks flushed outside the tick (a subscriber joined) that the others were not yet told of.
    untold: bool = False
    told: int = 0  # frames_total as of the last tick: what subscribers had the chance to take
    told_bytes: int = 0

    def flush(self) -> bool:
        if not self.pending:
            return False
        pending = self.pending
        self.pending = []
        run: list[Frame] = []
        for f in pending:  # (a large frame is a chunk of its own: see ALONE_BYTES)
            if len(f.data) >= ALONE_BYTES:
                if run:
                    self._add_chunk(run)
                    run = []
                self._add_chunk([f])
            else:
                run.append(f)
        if run:
            self._add_chunk(run)
        return True

    def _add_chunk(self, run: list[Frame]) -> None:
        frames = tuple(run)
        last = None
        for f in reversed(frames):
            if f.seq is not None:
                last = f.seq
                break
        data = frames[0].data if len(frames) == 1 else b"".join([f.data for f in frames])
        self.frames_total += len(frames)
        self.bytes_total += len(data)
        self.chunks.append(Chunk(data, frames, last, self.frames_total, self.bytes_total))

    def trim(self) -> None:
        low = min((s.cursor for s in self.subs), default=self.base + len(self.chunks))
        if low > self.base:
            del self.chunks[:low - self.base]
            self.base = low


class DirectWriter(Protocol):
    """Writes one body chunk to a subscriber's connection (see ``runtime.sse_socket``)."""

    def write_nowait(self, data: bytes) -> memoryview | None:
        """Write what the socket takes now; return the rest (``None``: all written). May raise OSError."""

    async def write_rest(self, rest: memoryview, *, stall_seconds: float | None = None,
                         stop: Callable[[], bool] | None = None) -> None:
        """Finish a write that :meth:`write_nowait` started; a client that takes nothing for
        ``stall_seconds`` (or ``stop()``) gets its connection reset and ``OSError`` raised."""


@dataclass(eq=False)
class Subscription:
    """One stream's place in its group, and the hand-over between its task and the bus.

    While the stream's task is *parked* (waiting, nothing in flight) and it has a direct
    ``writer``, the bus writes each flushed chunk itself, in the tick, without waking the task.
    Otherwise the bus only sets ``wake`` and the task takes and writes the chunks.
    """

    group: Group
    start: int  # frames with seq <= start are not delivered live: read them from the log
    cursor: int  # absolute index of the next chunk of the group to take
    taken: int  # group frames_total when this subscriber last took its chunks
    taken_bytes: int = 0  # group bytes_total then
    last: int = 0  # the last logged seq taken for this subscriber (its lastEventId once written)
    skip_through: int = 0  # resumed past the live start: frames with seq <= this are skipped
    # ``model.partial`` frames to write between the log replay and the first live chunk: what the
    # open model requests of this stream's sessions had streamed when it joined (see streamed.py).
    partial: bytes = b""
    # Deltas that waited in the bus's queue when this stream joined (by id, the frame kept): what
    # they carry is in ``partial`` or belongs to a request the replay shows over, so they are not
    # written live. Each is forgotten as it is taken.
    stale: dict[int, Frame] = field(default_factory=dict)
    writer: DirectWriter | None = None
    parked: bool = False
    rest: memoryview | None = None  # the tail of a write the bus started: the task finishes it
    writes: int = 0  # writes the bus made for this subscriber
    written_at: float = 0.0  # trio time of the bus's last write for it
    dropped: bool = False
    drop_reason: str = DROP_SLOW  # why it was cut off (written in its stream.dropped)
    gone: bool = False  # the bus's write failed: the client is gone
    closed: bool = False
    wake: trio.Event = field(default_factory=trio.Event)

    @property
    def session_id(self) -> str | None:
        return self.group.session_id

    @property
    def project_id(self) -> str | None:
        return self.group.project_id

    def take(self) -> bytes | None:
        """The bytes of the frames flushed since the last take, in order (``None``: nothing new):
        all of them, but for a chunk of :data:`ALONE_BYTES` or more, which is taken alone (never
        copied into one bytes object with others): the next take has what follows it."""
        g = self.group
        end = g.base + len(g.chunks)
        if self.cursor >= end:
            return None
        chunks = g.chunks[self.cursor - g.base:]
        if len(chunks) > 1:
            for i, c in enumerate(chunks):
                if len(c.data) >= ALONE_BYTES:
                    chunks = chunks[:max(i, 1)]
                    break
        self.cursor += len(chunks)
        self.taken = chunks[-1].frames_end
        self.taken_bytes = chunks[-1].bytes_end
        if self.skip_through or self.stale:
            skip, stale = self.skip_through, self.stale
            data = b"".join([f.data for c in chunks for f in c.frames
                             if (f.seq > skip if f.seq is not None else stale.pop(id(f), None) is not f)])
            if skip and chunks[-1].last_seq is not None and chunks[-1].last_seq >= skip:
                self.skip_through = 0
        else:
            data = chunks[0].data if len(chunks) == 1 else b"".join([c.data for c in chunks])
        for c in reversed(chunks):
            if c.last_seq is not None:
                if c.last_seq > self.last:
                    self.last = c.last_seq
                break
        return data


@dataclass
class Bus:
    store: EventStore
    buffer: int = 2048  # a subscriber more than this many frames behind is cut off
    buffer_bytes: int = BUFFER_BYTES  # ... or more than this many bytes behind
    tick: float = TICK_SECONDS
    position: int = 0
    inbox_max: int = INBOX_MAX_EVENTS
    queue_max: int = QUEUE_MAX_FRAMES
    queue_max_bytes: int = QUEUE_MAX_BYTES
    queue_overflows: int = 0  # times the queue overflowed and every stream was cut off
    log_reads: int = 0  # batches the bus had to read back from the log (it fell behind, or a gap)
    groups: dict[tuple[str | None, str | None], Group] = field(default_factory=dict)
    _dirty: trio.Event = field(default_factory=trio.Event)
    # Committed groups handed over by the store (EventStore.on_commit), not yet turned into frames.
    _inbox: list[list[StoredEvent]] = field(default_factory=list)
    _inbox_events: int = 0
    _behind: bool = False  # the inbox overflowed: read the log up to the store's last seq
    _taking: bool = False  # run() is turning inbox events into frames (and may be reading the log)
    _arrived: trio.Event = field(default_factory=trio.Event)
    # The project of each session seen committing since start: ephemeral frames (text deltas) are
    # published with their session only, and project-filtered streams must receive them too.
    _project_of: dict[str, str] = field(default_factory=dict)
    # What each agent's open model request has streamed so far, for streams joining mid-answer.
    streamed: StreamedSoFar = field(default_factory=StreamedSoFar)
    # Frames offered after a large event whose frame is not made yet (always the first here), in
    # the order offered; the maker task makes it in a worker thread, then hands the made ones on.
    _queue: deque[Frame | _Unmade] = field(default_factory=deque)
    # The bytes of its made frames, and the characters of each frame still to be made (its
    # event_chars, replaced by the frame's bytes once made): a queue of large events is bounded too.
    _queue_bytes: int = 0
    _unmade: trio.Event = field(default_factory=trio.Event)
    # The maker's own worker thread: never queued behind other work of trio's default limiter
    # (SSE replays' large frames, large request bodies, large JSON answers).
    maker_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(1))

    @property
    def sent(self) -> int:
        """The last seq whose frame went to the groups (the events before a frame still being made)."""
        return self._queue[0].se.seq - 1 if self._queue else self.position  # type: ignore[union-attr]

    @property
    def subscribers(self) -> set[Subscription]:
        return {s for g in self.groups.values() for s in g.subs}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the store: each committed group as the store hands it over, in ``seq`` order.

        Events normally come straight from the store's acknowledgement (no read-back, no
        decode). Should the bus ever miss some (a gap in ``seq``, or more than
        :attr:`inbox_max` waiting while this task could not run), it reads them from the
        log on a connection of its own, so nothing is skipped and nothing is sent twice.
        """
        self.position = self.store.last_seq
        tail = self.store.open_tail_reader()  # never queues behind session replays
        stop_listening = self.store.on_commit(self._committed)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ticker)
                nursery.start_soon(self._maker)
                task_status.started()
                while True:
                    await self._arrived.wait()
                    self._arrived = trio.Event()
                    await self._take_inbox(tail)
        finally:
            stop_listening()
            await tail.aclose()

    def _committed(self, events: list[StoredEvent]) -> None:
        """The store's listener (in its acknowledgement): queue the group for :meth:`run`."""
        project_of = self._project_of
        for se in events:
            if se.session_id is not None and se.project_id is not None:
                project_of[se.session_id] = se.project_id
        if not self._behind:
            self._inbox_events += len(events)
            if self._inbox_events > self.inbox_max:  # this task is starved: read the log instead
                self._behind = True
                self._inbox = []
                self._inbox_events = 0
            else:
                self._inbox.append(events)
        self._arrived.set()

    async def _take_inbox(self, tail: TailReader) -> None:
        self._taking = True
        try:
            if self._behind:
                self._behind = False  # groups acknowledged from now on are queued again
                await self._read_log(tail, self.store.last_seq)
            while self._inbox:
                inbox = self._inbox
                self._inbox = []
                self._inbox_events = 0
                for events in inbox:
                    if events[0].seq > self.position + 1 and events[-1].seq > self.position:
                        await self._read_log(tail, events[0].seq - 1)  # a gap: fill it from the log first
                    self._offer_fresh(events)
        finally:
            self._taking = False

    def _offer_fresh(self, events: list[StoredEvent]) -> None:
        """Offer the events of one committed group that are past :attr:`position`."""
        if events[-1].seq <= self.position:
            return  # read from the log already
        fresh = [se for se in events if se.seq > self.position]
        self._offer_events(fresh)

    def _offer_events(self, events: list[StoredEvent]) -> None:
        """Offer committed events (in order, past :attr:`position`) and move past them."""
        self.streamed.note_events(events)
        if not self.groups:  # no stream to send them to: no frames to make (nor any queued to keep)
            self._forget_queue()
        else:
            secrets = self.store.secrets
            frames: list[Frame | _Unmade] = []
            for se in events:
                chars = event_chars(se)
                frames.append(event_frame(se, secrets) if chars <= FRAME_OFF_LOOP_CHARS else _Unmade(se, chars))
            self._offer_all(frames)
        self.position = events[-1].seq

    def _offer_inbox_now(self) -> bool:
        """Turn what the inbox holds into frames at once (before an ephemeral frame is offered),
        so that a delta never overtakes the committed event it follows — its ``model.requested``
        is in the inbox from the acknowledgement on, but the bus's task may not have run yet.
        Left to the task when it is already at work or the log must be read (a gap, an overflow).
        Returns whether every event acknowledged so far has been offered."""
        if self._taking or self._behind:
            return False
        while self._inbox:
            events = self._inbox[0]
            if events[0].seq > self.position + 1 and events[-1].seq > self.position:
                return False  # a gap: the task reads the log first
            del self._inbox[0]
            self._inbox_events -= len(events)
            self._offer_fresh(events)
        return True

    async def _read_log(self, tail: TailReader, upto: int) -> None:
        """Offer the log's events after :attr:`position`, up to ``upto`` at least."""
        while self.position < upto:
            try:
                batch = await tail.read_events(after=self.position, limit=READ_BATCH)
            except CorruptEvent as exc:
                await self._skip_damaged(tail, exc, upto)
                continue
            if not batch:
                return
            self.log_reads += 1
            self._offer_events(batch)

    async def _skip_damaged(self, tail: TailReader, exc: CorruptEvent, upto: int) -> None:
        """A damaged event in what the bus reads back: offer the events before it, drop every
        subscriber (each gets ``stream.dropped`` and resumes from the log, whose replay ends at
        the damaged event saying so), and go on past it — the bus serves the events after it."""
        damaged = exc.seq if exc.seq is not None and exc.seq > self.position else None
        if damaged is not None and damaged - 1 > self.position:
            try:
                before = await tail.read_events(after=self.position, limit=damaged - 1 - self.position)
            except CorruptEvent:
                before = []
            if before:
                self.log_reads += 1
                self._offer_events(before)
        log.error("the live stream skips seq %s, which cannot be read (%s); its subscribers were dropped and "
                  "resume from the log (`lens log verify` reports the row)", damaged if damaged else "unknown", exc)
        self.flush()  # (the frames before it join each subscriber's backlog; a stream sends
        # stream.dropped naming what it did send, and the client reads the rest from the log)
        for g in list(self.groups.values()):
            for sub in list(g.subs):
                self._drop(sub, DROP_DAMAGED)
        self.position = damaged if damaged is not None else upto

    async def _ticker(self) -> None:
        """Flush at most once per tick (the first frame after a quiet spell at once), then write.

        The writes to parked subscribers go out in slices of at most :data:`WRITE_SLICE_SECONDS`
        with a checkpoint between slices, so the writer's own tasks (HTTP handlers, session
        actors, store acknowledgements) never wait behind a whole fan-out of thousands of
        streams — yet a few hundred streams get their writes without a pause in between. And
        the fan-out's own time bounds the tick: the next flush comes no sooner than
        ``busy / FANOUT_SHARE`` after this one, so fanning out never takes more than that share
        of the event loop (under CPU pressure writes get larger and rarer, the writer keeps its
        pace).
        """
        clock = time.perf_counter
        last = -1e9
        pause = self.tick
        while True:
            await self._dirty.wait()
            due = last + pause
            if trio.current_time() < due:
                await trio.sleep_until(due)
            self._dirty = trio.Event()
            last = trio.current_time()
            t0 = clock()
            todo = self.flush()
            busy = clock() - t0
            i = 0
            while i < len(todo):
                if i:
                    await trio.sleep(0)
                t0 = clock()
                end = t0 + WRITE_SLICE_SECONDS
                now = trio.current_time()
                for sub in todo[i:]:
                    i += 1
                    if sub.parked:  # still parked, still subscribed (unsubscribing unparks)
                        self._write(sub, now)
                        if clock() >= end:
                            break
                busy += clock() - t0
            pause = min(max(self.tick, busy / FANOUT_SHARE), MAX_TICK_SECONDS)

    def flush(self) -> list[Subscription]:
        """Flush every group: drop laggards, wake the subscribers whose task writes for itself.

        Returns the parked subscribers with a direct writer, for the bus to write to itself.
        """
        buffer, buffer_bytes = self.buffer, self.buffer_bytes
        todo: list[Subscription] = []
        for g in list(self.groups.values()):
            # What a subscriber has not taken of the frames flushed *before* this tick: one burst
            # larger than the buffer (a fast model's deltas, a queue of inputs) is not lateness —
            # nobody had a chance to write it yet. It counted, and dropped every reader at once.
            before, before_bytes = g.told, g.told_bytes
            if not g.flush() and not g.untold:
                continue
            g.untold = False
            g.told, g.told_bytes = g.frames_total, g.bytes_total
            for sub in list(g.subs):
                if before - sub.taken > buffer or before_bytes - sub.taken_bytes > buffer_bytes:
                    self._drop(sub)
                elif not sub.parked:
                    continue  # the task is busy: it takes what is pending before it parks again
                elif sub.writer is None or sub.skip_through:
                    sub.wake.set()
                else:
                    todo.append(sub)
            if len(g.chunks) > TRIM_CHUNKS:
                g.trim()
        return todo

    @staticmethod
    def _write(sub: Subscription, now: float) -> None:
        while (data := sub.take()) is not None:  # (more than one take past a large chunk)
            if not data:
                continue
            sub.writes += 1
            sub.written_at = now
            try:
                rest = sub.writer.write_nowait(data)  # type: ignore[union-attr]
            except OSError:
                sub.gone = True
                sub.parked = False
                sub.wake.set()
                return
            if rest is not None:  # the socket is full: the task waits for it and finishes the write
                sub.rest = rest
                sub.parked = False
                sub.wake.set()
                return

    def subscribe(self, session_id: str | None = None, project_id: str | None = None) -> Subscription:
        # What is acknowledged goes to the groups first (before this stream's group is made or
        # flushed, so that the stream reads it from the log, not live): the partial answers below
        # are then those of the requests the stream's replay shows open.
        in_order = self._offer_inbox_now()
        key = (session_id, project_id)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(session_id, project_id)
        elif g.flush():  # what is pending was committed up to `position`: the new subscriber reads it from the log
            g.untold = True  # ... and the next tick hands it to the others (it used to wait for their next frame)
            self._dirty.set()
        end = g.base + len(g.chunks)
        # Live from what is committed now, even if the bus has not read all of it yet: the stream
        # reads up to `start` from the log and skips those frames when they come through the bus.
        start = max(self.position, self.store.last_seq)
        sent = self.sent  # (behind `position` while a large event's frame is being made)
        sub = Subscription(g, start, end, g.frames_total, g.bytes_total, last=start,
                           skip_through=start if start > sent else 0)
        # The deltas queued behind a frame still being made were offered before this stream
        # joined: what they carry is in the partial below (their request is open as of `position`)
        # or their request is over in the replay. They are never written to it live.
        for f in self._queue:
            if isinstance(f, Frame) and f.seq is None and (session_id is None or f.session_id == session_id) and (
                    project_id is None or f.project_id == project_id):
                sub.stale[id(f)] = f
        # (`streamed` is noted up to `position`, deltas included as they are offered: with every
        # acknowledged event offered, the partials are exactly what the stream will not get live)
        if in_order and start == self.position:
            sub.partial = b"".join(sse_message("model.partial", data)
                                   for data in self.streamed.frames_for(session_id, project_id))
        g.subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.closed = True
        sub.parked = False
        g = sub.group
        g.subs.discard(sub)
        if not g.subs and self.groups.get((g.session_id, g.project_id)) is g:
            del self.groups[(g.session_id, g.project_id)]

    def poke_all(self) -> None:
        """Wake every stream's task (shutdown, credentials changed): each re-checks its state."""
        for g in self.groups.values():
            for sub in g.subs:
                sub.wake.set()

    def _drop(self, sub: Subscription, reason: str = DROP_SLOW) -> None:
        sub.dropped = True
        sub.drop_reason = reason
        self.unsubscribe(sub)
        sub.wake.set()

    def publish_delta(self, session_id: str, agent_id: str, kind: str, text: str) -> None:
        """A streaming delta of ``agent_id``'s open model request (``kind``: text or reasoning):
        an ephemeral ``model.delta`` frame (no id, not in the log; sent to the session's project
        too, as its committed events name it), also kept for streams that join later."""
        in_order = self._offer_inbox_now()
        self.streamed.note_delta(session_id, agent_id, kind, text, in_order=in_order,
                                 committed=self.store.last_seq)
        if not self.groups:  # no stream to send it to: no frame to make (nor any queued to keep)
            self._forget_queue()
            return
        data = {"session_id": session_id, "agent_id": agent_id, "kind": kind, "text": text}
        self._offer_all([Frame(None, self._project_of.get(session_id), session_id,
                               sse_message("model.delta", _json.encode(data)))])

    def _offer_all(self, frames: list[Frame | _Unmade]) -> None:
        """Queue ``frames`` (in order) for every group they match; the ticker flushes them. From
        a frame still to be made on, they wait in :attr:`_queue` (the maker hands them on). With
        no stream subscribed they are dropped, and so is the queue (a stream joining reads the log)."""
        if not self.groups:
            self._forget_queue()
            return
        ready = frames
        if self._queue or any(isinstance(f, _Unmade) for f in frames):
            cut = 0
            if not self._queue:
                while isinstance(frames[cut], Frame):
                    cut += 1
            ready = frames[:cut]
            if ready:
                self._distribute(ready)  # type: ignore[arg-type]
            queued = frames[cut:]
            self._queue.extend(queued)
            self._queue_bytes += sum([len(f.data) if isinstance(f, Frame) else f.chars for f in queued])
            self._unmade.set()
            if len(self._queue) > self.queue_max or self._queue_bytes > self.queue_max_bytes:
                self._overflow()
            return
        self._distribute(ready)  # type: ignore[arg-type]

    def _overflow(self) -> None:
        """The queue behind a frame being made grew past its bound: forget it and cut every
        stream off (``stream.dropped`` naming the last seq it was sent; it resumes from the log,
        whose replay makes the frames itself), as a subscriber too far behind is. With no stream
        left there is nobody to cut off: the queue is only forgotten."""
        if not self.groups:
            self._forget_queue()
            return
        log.warning("%d frames (%d bytes) waited behind a large event's frame; every stream was cut off and "
                    "resumes from the log", len(self._queue), self._queue_bytes)
        self.queue_overflows += 1
        self._forget_queue()
        for g in list(self.groups.values()):
            for sub in list(g.subs):
                self._drop(sub, DROP_QUEUE)

    def _forget_queue(self) -> None:
        """Drop every frame waiting in :attr:`_queue` (made or not) and its count of bytes."""
        self._queue.clear()
        self._queue_bytes = 0

    async def _maker(self) -> None:
        """Make the frame at the head of :attr:`_queue` in a worker thread, then hand on every
        frame before the next one to make; again, until the queue is empty. An error making a
        frame ends the bus, as one on the loop did."""
        queue = self._queue
        while True:
            await self._unmade.wait()
            self._unmade = trio.Event()
            while queue:
                head = queue[0]
                if not self.groups:  # nobody to send them to (a stream joining now reads the log)
                    self._forget_queue()
                    break
                if isinstance(head, _Unmade):
                    frame = await trio.to_thread.run_sync(event_frame_in_pieces, head.se, self.store.secrets,
                                                          limiter=self.maker_limiter)
                    if not queue or queue[0] is not head:
                        continue  # (cleared meanwhile)
                    queue[0] = frame
                    self._queue_bytes += len(frame.data) - head.chars
                ready: list[Frame] = []
                while queue and isinstance(queue[0], Frame):
                    ready.append(queue.popleft())  # type: ignore[arg-type]
                if ready:
                    self._queue_bytes -= sum([len(f.data) for f in ready])
                    self._distribute(ready)

    def _distribute(self, frames: list[Frame]) -> None:
        """Append ``frames`` (made, in order) to the pending list of every group they match."""
        if not self.groups:
            return
        offered = False
        for g in self.groups.values():
            sid, pid = g.session_id, g.project_id
            if sid is None and pid is None:
                g.pending.extend(frames)
                offered = True
                continue
            pending = g.pending
            for frame in frames:
                if (sid is not None and frame.session_id != sid) or (pid is not None and frame.project_id != pid):
                    continue
                pending.append(frame)
                offered = True
        if offered:
            self._dirty.set()
