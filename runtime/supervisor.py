"""The supervisor: one :class:`SessionActor` per live session, started on demand.

Callers talk to sessions only through :meth:`Supervisor.call`. An actor that passivated is woken
by the next call (replay); one that crashed is restarted from the log, up to ``max_restarts``
times in a row: the crash that would need one more restart quarantines the session (a
``session.quarantined`` event and a clear status) instead of crash-looping (0: the first crash).
Crashes are consecutive while no run of the session ends at rest between them (a crash loop never
does; a session that recovered and is set going again by a call counts afresh). At start the
supervisor wakes every session the log shows with unfinished work (a running task, queued inputs
or a background job without its end) and no quarantine, so a restart resumes them (and records
such jobs lost):
asked of a ``pending`` source when one is given (the daemon's: the sessions projection), else of
the whole log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

from events import types as t
from events.errors import CorruptEvent, LogError
from events.ids import is_unnamed_input_id
from events.secrets import Secrets
from events.store import STORAGE_ERRORS, Draft, StoreWriteFailed

from .actor import (RESULT_RECORDS, ActorDeps, Command, Create, Delete, Envelope, GetState, GetView, SessionActor,
                    Submit)
from .errors import (MAX_FORK_DEPTH, ActorUnavailable, ForkPointInvalid, ForkTooDeep, RequestIdReserved, SessionGone,
                     SessionNotFound, SessionQuarantined)
from .fork_chain import ForkChain
from .working_context import DescribeContext

log = logging.getLogger("lens.supervisor")

MAILBOX = 64
# Rows read at a time walking a session's event kinds around a fork point (bodies not decoded).
KINDS_PAGE = 256
_RECORD_KINDS = frozenset(r.__struct_config__.tag for r in RESULT_RECORDS)
_STORED = t.ArtifactStored.__struct_config__.tag
_FINISHED = t.ToolFinished.__struct_config__.tag

# What reading a broken session's log raises: its damage (a body that does not decode, damaged
# pages: the log's own errors, with their seq) or a failure of the storage under it. Anything
# else out of such a read is a defect of ours, and is let through (a route answers 500 INTERNAL
# and logs its traceback) rather than passed off as the session's quarantine.
READ_FAILURES = (LogError, *STORAGE_ERRORS)


@dataclass
class _Handle:
    session_id: str
    send: trio.MemorySendChannel[Envelope]
    recv: trio.MemoryReceiveChannel[Envelope]
    actor: SessionActor | None = None
    started: trio.Event = field(default_factory=trio.Event)


# Sessions with unfinished work, or None when the source cannot tell (the log is asked instead).
PendingSource = Callable[[], Awaitable["list[str] | None"]]

PENDING_WORK_SQL = """
SELECT session_id FROM events WHERE session_id IS NOT NULL GROUP BY session_id
HAVING sum(kind = 'session.quarantined') = 0 AND (
       sum(kind = 'task.started') > sum(kind = 'task.finished')
    OR sum(kind = 'input.submitted') > sum(kind IN ('input.placed', 'input.withdrawn'))
    OR sum(kind = 'job.started') > sum(kind = 'job.finished'))
"""


class Supervisor:
    def __init__(self, deps: ActorDeps, *, max_restarts: int = 3, pending: PendingSource | None = None) -> None:
        self.deps = deps
        self.max_restarts = max_restarts
        self._pending = pending
        self._actors: dict[str, _Handle] = {}
        self._quarantined: dict[str, str] = {}
        self._deleted: set[str] = set()  # quarantined sessions known deleted (see _delete_quarantined, _was_deleted)
        self._undeleted: set[str] = set()  # quarantined sessions whose log was read holding no session.deleted
        self._delete_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None

    @property
    def live_sessions(self) -> list[str]:
        return list(self._actors)

    def sessions_at_unrecorded_work(self) -> set[str]:
        """The live sessions at work their log does not show yet (``/skill:`` inputs being
        checked, a manual compaction under way), read from the actors' memory without a call (a
        list of sessions must not wait on every busy mailbox)."""
        return {sid for sid, h in self._actors.items() if h.actor is not None and h.actor.unrecorded_work}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own every actor; wake sessions with unfinished work; run until cancelled."""
        snapshots = self.deps.snapshots
        if snapshots is not None:  # before any actor runs (and appends): see forget_after
            await trio.to_thread.run_sync(snapshots.forget_after, self.deps.store.last_seq,
                                          limiter=self.deps.snapshot_limiter)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            found = await self._pending() if self._pending is not None else None
            for session_id in found if found is not None else await self.sessions_with_pending_work():
                self._ensure(session_id)
            task_status.started()
            await trio.sleep_forever()

    async def sessions_with_pending_work(self) -> list[str]:
        """The sessions with unfinished work, from a scan of the whole log (one pass over every
        session's rows: seconds on a log of millions of events)."""
        store = self.deps.store

        def query() -> list[str]:
            reader = store._get_reader()
            return [r[0] for r in reader.conn.execute(PENDING_WORK_SQL)]

        return await trio.to_thread.run_sync(query, limiter=store._read_limiter)

    async def create_session(self, project_id: str | None, *, model: str | None = None,
                             thinking_level: str | None = None, name: str | None = None,
                             default_model: str | None = None) -> str:
        """Start a new session; returns its id. ``model`` is checked (a provider must serve
        it); ``default_model`` is taken unchecked when no ``model`` is given (the daemon's
        default: one that cannot serve fails at submit)."""
        if model is not None:
            self.deps.catalog.resolve(model)
        else:
            model = default_model
        session_id = self.deps.new_id("ses")
        await self.call(session_id, Create(project_id, model=model, thinking_level=thinking_level, name=name))
        return session_id

    async def fork_session(self, source_session_id: str, seq: int, *, name: str | None = None) -> str:
        """Start a new session whose state is ``source_session_id``'s as of its event ``seq``
        (its contexts, settings, model and thinking level then; idle, with nothing queued).

        Raises ``SESSION_NOT_FOUND`` for an unknown source, :class:`ForkPointInvalid`
        (``VALIDATION_FAILED``) when ``seq`` is not one of the source session's events (an event the
        source inherited as a fork is taken: the new session is made from the session that recorded
        it, :meth:`_inherited_from`), ``FORK_TOO_DEEP`` when the source is a fork of a
        fork … :data:`MAX_FORK_DEPTH` levels deep, and the log's code (``EVENT_CORRUPT``) when the
        source cannot be read up to ``seq``. The source is read from its log, not woken: a
        quarantined source (one whose log is damaged after ``seq``, say) can be forked too.
        """
        store = self.deps.store
        if not await store.session_last_seq(source_session_id):
            raise SessionNotFound(f"no session {source_session_id!r}")
        # The stored row, not its decoded event: whose the seq is needs no body, and a damaged
        # body at the fork point is then answered as one before it (the actor's read names it).
        rows = await store.read_rows(after=seq - 1, limit=1) if seq >= 1 else []
        if not rows or rows[0].seq != seq or rows[0].session_id != source_session_id:
            # (the session whose event seq is; None when seq is no event, or one of no session)
            owner = rows[0].session_id if rows and rows[0].seq == seq else None
            inherited: str | None = None
            if owner is not None:
                inherited = await self._inherited_from(source_session_id, owner, seq)
            if inherited is None:
                raise ForkPointInvalid(f"seq {seq} is not an event of session {source_session_id!r}")
            # An event the source holds as a fork, from a session it was forked from (its view
            # shows the items with those seqs): the state as of it is that session's, so the new
            # session is made from there.
            source_session_id = inherited
        if await self._fork_depth(source_session_id) >= MAX_FORK_DEPTH:
            raise ForkTooDeep(f"session {source_session_id!r} is a fork of a fork {MAX_FORK_DEPTH} levels deep, the "
                              "most there may be: fork a session earlier in that chain, or start a new one")
        seq = await self._end_of_result(source_session_id, seq)
        project_id = await store.session_project(source_session_id)
        session_id = self.deps.new_id("ses")
        # (its model and thinking level are the source's as of seq: the actor reads them there)
        await self.call(session_id, Create(project_id, name=name,
                                           forked_from_session=source_session_id, forked_from_seq=seq))
        return session_id

    async def _end_of_result(self, session_id: str, seq: int) -> int:
        """Where a fork asked at ``seq`` is made: ``seq``, or, when ``seq`` is a call's
        ``tool.finished``, one of the records its result wrote with it or a file copy stored among
        them, the last of those records (:data:`RESULT_RECORDS` naming that call, and the
        ``artifact.stored`` copies before a ``file.edited``). The log never held the call's result
        without them, so a fork between them would start from a state the session never had: the
        call answered ``ok`` while its todo list, file edit or loaded tools were missing.

        The write is found from the rows' kinds (no body decoded but the ``tool.finished`` and
        the records, which name the call), read in pages either way with no bound on its length:
        a program's result may record hundreds of todo lists, and an event before ``seq`` may be
        as large as the log allows."""
        store = self.deps.store
        try:
            owner = None  # (the seq of the tool.finished whose write seq may be in)
            at = seq
            while owner is None:
                rows = await store.session_kinds(session_id, at, back=True, limit=KINDS_PAGE)
                if at == seq and (not rows or rows[0][0] != seq):
                    return seq  # (not an event of this session: the fork's own checks name it)
                for row_seq, kind in rows:
                    if kind == _STORED or kind in _RECORD_KINDS:
                        continue
                    if kind != _FINISHED:
                        return seq
                    owner = row_seq
                    break
                else:
                    if len(rows) < KINDS_PAGE:
                        return seq  # (the session's start: no call's result before seq)
                    at = rows[-1][0] - 1
            first = await store.read_events(after=owner - 1, limit=1, session_id=session_id)
            if not first or first[0].seq != owner or not isinstance(first[0].event, t.ToolFinished):
                return seq
            call_id = first[0].event.call_id
            # The write's reach: the records and copies after the tool.finished, by kind...
            last = at = owner
            while True:
                rows = await store.session_kinds(session_id, at, back=False, limit=KINDS_PAGE)
                for row_seq, kind in rows:
                    if kind != _STORED and kind not in _RECORD_KINDS:
                        break
                    last = row_seq
                else:
                    if len(rows) == KINDS_PAGE:
                        at = last
                        continue
                break
            # ...then the records themselves (the copies not decoded), up to the first of another call.
            end = at = owner
            while at < last:
                page = await store.read_events(after=at, to=last, session_id=session_id, kinds=sorted(_RECORD_KINDS))
                if not page:
                    break
                for se in page:
                    if getattr(se.event, "call_id", None) != call_id:
                        return max(seq, end)
                    end = se.seq
                at = page[-1].seq
            return max(seq, end)
        except LogError:
            return seq  # (a damaged event there is named by the fork's own read of the source)

    async def _inherited_from(self, session_id: str, owner: str, seq: int) -> str | None:
        """``owner`` when ``seq``, an event of ``owner``, is one ``session_id`` inherited: ``owner``
        is in its chain of sources and each fork on the way was made at or after ``seq``; else None.
        The walk is bounded by the chain's length, not MAX_FORK_DEPTH: a log may hold a longer chain,
        made before that limit, whose last link's view shows its first source's items."""
        try:
            async for link in ForkChain(self.deps.store, session_id):
                if (link.forked_from_seq or 0) < seq:
                    return None
                if link.forked_from_session == owner:
                    return owner
        except LogError:
            pass
        return None

    async def _fork_depth(self, session_id: str) -> int:
        """How many forks deep ``session_id`` is (0: no fork), counted up to MAX_FORK_DEPTH: each
        link's ``session.created`` names its source. A link whose first event cannot be read ends
        the count there: a fork never reads it (it starts from a snapshot of the next link), and
        a damaged event must not stop forks the log can make."""
        depth = 0
        try:
            async for _link in ForkChain(self.deps.store, session_id):
                depth += 1
                if depth >= MAX_FORK_DEPTH:
                    break
        except LogError:
            pass
        return depth

    async def call(self, session_id: str, command: Command) -> Any:
        """Deliver ``command`` to the session's actor and return its answer.

        Raises the actor's typed errors (:mod:`runtime.errors`), ``SESSION_QUARANTINED``, or
        ``SESSION_UNAVAILABLE`` when the actor crashed while serving the call (safe to retry:
        submissions are idempotent by request id).
        """
        for _ in range(100):
            if session_id in self._quarantined:  # checked on every try: a retry must not revive it
                if isinstance(command, GetState):
                    return await self._quarantined_state(session_id)
                if isinstance(command, GetView):
                    return command.view(await self._quarantined_state(session_id), self.deps.store.secrets)
                if isinstance(command, DescribeContext):  # (as the view: what the log holds, no actor)
                    return await (await self._quarantined_reader(session_id)).context.describe(command.agent_id)
                if isinstance(command, Delete):
                    return await self._delete_quarantined(session_id)
                if isinstance(command, Submit):
                    # A retry of an input the log holds is answered as its first try was (F-LOG-4),
                    # as a live actor answers one of a deleted or quarantined session: from the
                    # store, whose rows' columns are read, not the bodies that may be damaged.
                    original = await self.deps.store.recorded(session_id, command.request_id)
                    if original is not None:
                        return {"requestId": command.request_id, "seq": original.seq, "duplicate": True}
                    if is_unnamed_input_id(command.request_id):  # (as a live actor refuses it)
                        raise RequestIdReserved.of(command.request_id)
                if await self._was_deleted(session_id):  # (as the actor answers a deleted session)
                    raise SessionGone.of(session_id)
                raise SessionQuarantined.of(session_id, self._quarantined[session_id])
            handle = self._ensure(session_id)
            env = Envelope(command)
            try:
                await handle.send.send(env)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The actor passivated between our lookup and the send: wake a new one.
                if self._actors.get(session_id) is handle:
                    del self._actors[session_id]
                continue
            await env.done.wait()
            if env.error is not None:
                if await self._answered_as_quarantined(session_id, command, env.error):
                    continue  # (answered above, as the calls after it are)
                raise env.error
            return env.result
        raise ActorUnavailable(f"session {session_id!r} could not be woken")

    async def _answered_as_quarantined(self, session_id: str, command: Command, error: BaseException) -> bool:
        """Whether a call the woken actor failed (its replay failing until the session was
        quarantined: after a restart, the first call to a session whose log cannot be read) is
        to be answered again as a quarantined session's calls are. A deleted session's are (its
        view and context as deleted, its changes SESSION_DELETED), and so is a retry of an input
        the log holds (its duplicate, F-LOG-4): nothing of the session runs, so nothing of the
        call was done; any other keeps the answer it was given."""
        if not isinstance(error, (SessionQuarantined, ActorUnavailable)) or session_id not in self._quarantined:
            return False
        if isinstance(command, Submit) and await self.deps.store.recorded(session_id, command.request_id) is not None:
            return True
        return await self._was_deleted(session_id)

    async def _quarantined_state(self, session_id: str) -> Any:
        """A quarantined session's view, read from its log without an actor (as a restarted
        daemon shows it: status ``quarantined``); if even that read fails, SESSION_QUARANTINED."""
        return (await self._quarantined_reader(session_id)).state

    async def _quarantined_reader(self, session_id: str) -> SessionActor:
        """An actor of a quarantined session that holds its state as read from its log and
        serves nothing (its mailbox is closed, it runs nothing): for the reads a client may
        still make (the view, the context). SESSION_QUARANTINED if even that read fails: the
        quarantine's reason names what failed (a damaged event, with its seq)."""
        reason = self._quarantined[session_id]
        send, recv = trio.open_memory_channel[Envelope](0)
        send.close()
        recv.close()
        reader = SessionActor(session_id, self.deps, recv)
        try:
            state = reader.state = await reader.load_state()
        except READ_FAILURES as exc:
            log.debug("cannot read quarantined session %s: %r", session_id, exc)
            state = reader.state = await self._deleted_state_before(reader, exc, reason)
        if state.quarantined is None:  # the quarantine event could not be recorded
            state.quarantined = reason
        return reader

    async def _deleted_state_before(self, reader: SessionActor, exc: Exception, reason: str) -> Any:
        """A deleted quarantined session whose log cannot be read whole is read as a deleted
        session is (its view, its context): its state up to the damaged event ``exc`` names,
        marked deleted (its ``session.deleted`` comes after). Any other, or one whose log cannot be
        read even that far, is SESSION_QUARANTINED naming the reason."""
        session_id = reader.session_id
        refusal = SessionQuarantined.of(session_id, reason)
        if not isinstance(exc, CorruptEvent) or exc.seq is None or not await self._was_deleted(session_id):
            raise refusal from None
        try:
            state = await reader.load_state_before(exc.seq)
        except READ_FAILURES as again:
            log.debug("cannot read deleted quarantined session %s before seq %s: %r", session_id, exc.seq, again)
            raise refusal from None
        state.deleted = True
        return state

    async def _was_deleted(self, session_id: str) -> bool:
        """Whether the quarantined ``session_id`` was deleted (here, or as its log records: a
        ``session.deleted``, read without decoding any other event, after a restart). The log is
        asked once either way: nothing of a quarantined session runs, so only
        :meth:`_delete_quarantined` can delete it from then on, and it says so here. A read that
        fails answers "not deleted" without being kept (the next call asks again)."""
        if session_id in self._deleted:
            return True
        if session_id in self._undeleted:
            return False
        try:
            deleted = bool(await self.deps.store.read_events(session_id=session_id, kinds=["session.deleted"], limit=1))
        except READ_FAILURES:
            return False
        (self._deleted if deleted else self._undeleted).add(session_id)
        return deleted

    async def _delete_quarantined(self, session_id: str) -> dict[str, bool]:
        """Soft-delete a quarantined session (F-ACT-6) without an actor: ``session.deleted`` is
        recorded as its quarantine was, from the rows' columns (its bodies may be what cannot be
        decoded); nothing of it runs, so there is nothing to abort. ``SESSION_DELETED`` when it
        was deleted already."""
        async with self._delete_lock:  # (no actor serializes them: two at once record one event)
            if (session_id in self._deleted
                    or await self.deps.store.read_events(session_id=session_id, kinds=["session.deleted"], limit=1)):
                self._deleted.add(session_id)
                raise SessionGone.of(session_id)
            project_id = await self.deps.store.session_project(session_id)
            await self.deps.store.append(Draft(t.SessionDeleted(), project_id=project_id, session_id=session_id))
            self._deleted.add(session_id)
            self._undeleted.discard(session_id)
        return {"deleted": True}

    async def _recorded_quarantine(self, session_id: str) -> bool:
        """Whether the log holds a ``session.quarantined`` of ``session_id`` (False if its read
        fails as a broken log's does, :data:`READ_FAILURES`; anything else is raised)."""
        try:
            return bool(await self.deps.store.read_events(session_id=session_id, kinds=["session.quarantined"],
                                                          limit=1))
        except READ_FAILURES:
            return False

    def _ensure(self, session_id: str) -> _Handle:
        handle = self._actors.get(session_id)
        if handle is not None:
            return handle
        if self._nursery is None:
            raise ActorUnavailable("the supervisor is not running")
        send, recv = trio.open_memory_channel[Envelope](MAILBOX)
        handle = self._actors[session_id] = _Handle(session_id, send, recv)
        self._nursery.start_soon(self._supervise, handle)
        return handle

    async def _supervise(self, handle: _Handle) -> None:
        failures = 0
        storage_delay = STORAGE_RETRY_FIRST
        try:
            while True:
                actor = SessionActor(handle.session_id, self.deps, handle.recv)
                handle.actor = actor
                try:
                    await actor.run()
                    return  # passivated (mailbox closed) or the mailbox ended
                except Exception as exc:  # a crash is contained here, never reaches the daemon
                    fault = _storage_fault(exc, self.deps.store.secrets)
                    if fault is not None:
                        # The log cannot be written (a full disk, a read-only or failing file
                        # system): no fault of this session, so no step towards quarantine. Its
                        # callers are told to retry; it resumes from the log once writes succeed.
                        # The wait doubles over faults in a row, and starts again from the first
                        # once an append went through between them.
                        if actor.appended:
                            storage_delay = STORAGE_RETRY_FIRST
                        log.warning("session %s: the event log failed (%s); retrying in %.0f s",
                                    handle.session_id, fault, storage_delay)
                        unavailable = ActorUnavailable(
                            f"session {handle.session_id!r} cannot write its event log right now ({fault}); "
                            f"retry later")
                        actor.fail_pending(unavailable)
                        await _refuse_for(handle, storage_delay, unavailable)
                        storage_delay = min(storage_delay * 2, STORAGE_RETRY_MAX)
                        continue
                    # Consecutive crashes: a run that ended at rest since the last one (the
                    # session recovered; only an outside call sets it going again) starts the
                    # count afresh, as a passivation between them does.
                    failures = 1 if actor.rested else failures + 1
                    log.error("session %s actor crashed (%d in a row; at most %d restarts): %r", handle.session_id,
                              failures, self.max_restarts, exc, exc_info=exc)  # (a defect: where it was raised)
                    actor.fail_pending(ActorUnavailable(
                        f"session {handle.session_id!r} failed while serving this call; retry it"))
                    if failures > self.max_restarts:  # (restarted ``failures - 1`` times so far)
                        await self._quarantine(handle, _describe(exc))
                        return
        finally:
            if self._actors.get(handle.session_id) is handle:
                del self._actors[handle.session_id]

    async def _quarantine(self, handle: _Handle, reason: str) -> None:
        # Record it before answering anyone: a caller told SESSION_QUARANTINED finds the event.
        # Calls arriving meanwhile queue in the mailbox and are answered below.
        # The event carries the session's project like the session's other events, so streams
        # filtered by project see it too (it is read from the rows' columns: the session's bodies
        # may be what cannot be decoded).
        with trio.CancelScope(shield=True):
            # Once is enough: a session the log shows quarantined already (its replay failing again
            # after a restart) is not recorded again each time.
            try:
                if not await self._recorded_quarantine(handle.session_id):
                    try:
                        project_id = await self.deps.store.session_project(handle.session_id)
                    except READ_FAILURES as exc:
                        log.warning("session %s: its project could not be read (%r)", handle.session_id, exc)
                        project_id = None
                    await self.deps.store.append(Draft(
                        t.SessionQuarantined(reason=self.deps.store.secrets.cut(reason, 2000)), project_id=project_id,
                        session_id=handle.session_id))
            except Exception as exc:
                # The log itself may be what fails (the status stays in memory). The session is
                # quarantined for its crashes whatever fails here; a defect of ours in the
                # recording is logged with its traceback, not taken for "not recorded".
                log.error("could not record quarantine of %s: %r", handle.session_id, exc,
                          exc_info=not isinstance(exc, READ_FAILURES + (StoreWriteFailed,)))
        self._quarantined[handle.session_id] = reason
        err = SessionQuarantined.of(handle.session_id, reason)
        while True:  # answer what is queued, then close (no checkpoint in between)
            try:
                handle.recv.receive_nowait().reply(error=err)
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        handle.recv.close()


# A session whose actor failed on the event log itself is restarted after these many seconds,
# doubling up to the last (it replays, then tries again); a fault after an append went through
# waits the first again.
STORAGE_RETRY_FIRST = 1.0
STORAGE_RETRY_MAX = 30.0

async def _refuse_for(handle: _Handle, seconds: float, error: BaseException) -> None:
    """Wait ``seconds`` before a session's actor is restarted, answering every call that arrives
    meanwhile with ``error`` at once (queued, it would wait out the whole pause, up to
    :data:`STORAGE_RETRY_MAX`, for an answer that is most likely the same)."""
    with trio.move_on_after(seconds):
        async for env in handle.recv:
            env.reply(error=error)


def _storage_fault(exc: BaseException, secrets: Secrets | None = None) -> str | None:
    """What failed, when ``exc`` (or every exception it groups) is a failure of the storage under
    the log — a commit the file system failed (``STORE_WRITE_FAILED`` of a full, read-only,
    failing or locked store) or such an error of SQLite on a read — rather than of the session
    (a commit refused for what it holds still counts towards quarantine); else ``None``. The
    text (SQLite's or the file system's) is cut after ``secrets`` are replaced in it."""
    if isinstance(exc, BaseExceptionGroup):
        faults = [_storage_fault(e, secrets) for e in exc.exceptions]
        return faults[0] if faults and all(f is not None for f in faults) else None
    if (isinstance(exc, StoreWriteFailed) and exc.storage) or isinstance(exc, STORAGE_ERRORS):
        return (secrets or Secrets()).cut(f"{type(exc).__name__}: {exc}", 300)
    return None


def _describe(exc: BaseException) -> str:
    """``Type: message`` of what failed, looking inside the exception groups nurseries raise."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
