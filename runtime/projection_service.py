"""The daemon's projector task and read access to ``projections.db``.

HTTP lists read projections; to give read-your-writes, a handler first waits until the
projector has caught up with the log's last committed ``seq`` (:meth:`caught_up`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import trio

from events.errors import LogError, StoreClosed
from events.reader import LogReader
from events.schema import PROJECTIONS_DB, open_read_connection
from events.store import STORAGE_ERRORS, EventStore
from events.types import DefaultModelSet
from projections.artifact_names import ArtifactNames
from projections.artifact_types import ArtifactTypes
from projections.history import HistoryIndex
from projections.projector import Projector, open_projections_db
from projections.registry import all_projections
from projections.settings import DEFAULT_MODEL_KEY

from .errors import LensError

log = logging.getLogger("lens.projections")


class ProjectionStalled(LensError):
    code = "PROJECTION_STALLED"


class _CatchUpStopped(Exception):
    """Raised in the projector's thread between two chunks once :meth:`ProjectionService.stop` asked."""


class ProjectionsUnreadable(LensError):
    """``projections.db`` failed a read (damaged, replaced under the daemon, an I/O error)."""

    code = "PROJECTIONS_UNREADABLE"


def _unreadable(exc: apsw.Error) -> ProjectionsUnreadable:
    log.error("projections.db read failed: %r", exc)
    return ProjectionsUnreadable(
        f"projections.db cannot be read ({type(exc).__name__}: {exc}); it holds only what is derived "
        f"from the event log: stop the daemon, delete projections.db (with its -wal and -shm files) "
        f"and start it again, which rebuilds it")


# The sessions projection counts each session's open tasks and queued inputs.
PENDING_SESSIONS_SQL = ("SELECT id FROM sessions WHERE quarantined = 0 AND (open_tasks > 0 OR queued > 0 "
                        "OR id IN (SELECT session_id FROM session_jobs))")
# Sessions that events the projection has not seen yet may have put to work (or finished). No
# DISTINCT: with it SQLite walks the whole (session_id, session_seq) index instead of the seq range.
UNPROJECTED_WORK_SQL = (
    "SELECT session_id FROM events WHERE seq > ? AND kind IN "
    "('task.started', 'task.finished', 'input.submitted', 'input.placed', 'input.withdrawn', "
    "'job.started', 'job.finished')"
)


# How long the start-up's look for pending work waits for the first catch-up before it scans
# the log instead (a first catch-up that refolds a large log takes far longer).
FIRST_CATCH_UP_WAIT_SECONDS = 2.0
# After a failed catch-up the projector tries again after this pause, doubling up to the most.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
# After a catch-up that found projections.db held by another process (it already waited the busy
# timeout for it), the next try comes after this short pause, not the growing one: the
# projections go on within about this long after the holder (a `lens log rebuild`) lets go.
BUSY_RETRY_SECONDS = 0.5
# The projector's busy wait (for a projections.db another process holds) looks this often whether
# the daemon is stopping now.
BUSY_POLL_SECONDS = 0.01
# A graceful stop waits at most this long, from its signal, for a projections.db another process
# holds (the updater's wait and the last catch-up's together); the projections are then left
# behind the log, which the next start folds. Waiting is for a short hold (a `lens log stats`
# creating its tables); a `lens log rebuild` holds the file for as long as it folds.
STOP_BUSY_WAIT_SECONDS = 2.0

# default_model.set events the settings projection has not seen yet (a range of the seq key).
UNPROJECTED_DEFAULT_MODEL_SQL = "SELECT seq FROM events WHERE seq > ? AND kind = 'default_model.set'"


class ProjectionService:
    def __init__(self, data_dir: Path, store: EventStore) -> None:
        self.store = store
        reader = LogReader(data_dir, connection=open_read_connection(data_dir))
        self.projector = Projector(reader, open_projections_db(data_dir), all_projections(store.secrets))
        self._read_conn = open_projections_db(data_dir)
        # The file these connections hold, to notice it deleted (or replaced) under the daemon.
        self._path = data_dir / PROJECTIONS_DB
        self._file: tuple[int, int] | None = _identity(self._path)
        # Made once, here: making one registers its rank function on the connection, which apsw
        # refuses while a worker thread is reading through it (a 500 under concurrent searches).
        self._history_index = HistoryIndex(self._read_conn, store.secrets)
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)
        self.position = 0
        self.error: str | None = None
        self._busy = False  # the last catch-up failed only because another process held the file
        self._advanced = trio.Event()
        self._first_done = trio.Event()  # the first catch-up ended (caught up, or failed)
        self._stopping = threading.Event()  # read by the projector's thread between two chunks
        # SQLite's busy wait for a projections.db another process holds (a `lens log rebuild`)
        # runs in the projector's worker thread, which no cancellation reaches: a daemon stopping
        # then waited the busy timeout (10 s) for its updater and again for its last catch-up.
        # The same wait (the busy timeout the connection was opened with), given up once stop()
        # is called (a second stop signal: stop now), and cut to a bound once stopping() is (the
        # graceful stop).
        (self._busy_timeout_ms,) = self.projector.conn.execute("PRAGMA busy_timeout").fetchone()
        self._give_up_at: float | None = None  # (time.monotonic(): the graceful stop's bound)
        self.projector.conn.setbusyhandler(self._busy_wait)

    def stop(self) -> None:
        """Have a catch-up in progress end after the chunk it is folding (the daemon is stopping).

        A catch-up runs in a worker thread, which a cancellation does not reach: a refold of a
        large log at start-up (a minute for 800,000 events) held a SIGINT or SIGTERM until it
        was done. What it committed stays; the next start goes on from there."""
        self._stopping.set()

    def stopping(self) -> None:
        """The daemon began a graceful stop: a wait for a ``projections.db`` another process holds
        (the updater's, in progress or to come, and the last catch-up's) ends
        :data:`STOP_BUSY_WAIT_SECONDS` from now at the latest, and the catch-up then fails as it
        does after the busy timeout (:meth:`last_catch_up` says so). Folding itself is not cut:
        only the wait for the file."""
        self._give_up_at = time.monotonic() + STOP_BUSY_WAIT_SECONDS

    def _busy_wait(self, tries: int) -> bool:
        """apsw's busy handler for the projector's connection: wait and try again, as SQLite's
        busy timeout does (the connection's), unless :meth:`stop` was called or the bound of
        :meth:`stopping` is reached. Runs in the projector's thread."""
        if tries * BUSY_POLL_SECONDS * 1000 >= self._busy_timeout_ms:
            return False
        pause = BUSY_POLL_SECONDS
        if (give_up_at := self._give_up_at) is not None:
            pause = min(pause, give_up_at - time.monotonic())
            if pause <= 0:
                return False
        return not self._stopping.wait(pause)

    def _stop_point(self, done: int, total: int) -> None:
        """The projector's progress callback: called between chunks, in its thread."""
        if self._stopping.is_set():
            raise _CatchUpStopped

    async def last_catch_up(self) -> str | None:
        """Fold what was committed after the updater stopped: at a graceful stop the updater is
        cancelled with the other services, while the store outlives them and commits what the
        sessions write as they stop. Called once the store has drained, so ``projections.db``
        matches the log the daemon leaves (a ``lens log rebuild`` right after gives the same
        rows). Not folded after :meth:`stop` (a stop during start-up, a stop now): those end at once.

        Returns the line to tell the user when the projections stay behind the log because
        another process holds ``projections.db`` (the stop waited the bound of :meth:`stopping`
        for it, or after :meth:`stop` did not wait), with how far behind; else ``None``."""
        if not self._stopping.is_set():
            await self._catch_up()
            if not self._busy:
                return None
        # After stop() nothing is folded: a stop during start-up gave the first catch-up up at once
        # (a start held behind the file ended with `lens: stopped` and no word of why the
        # projections stayed behind), a stop now ended the graceful stop's wait. The same line
        # then, when the file is held; whether it is, is looked at too (the stop may have come
        # before any catch-up met the file).
        lowest, held = await self._behind_and_held(look_for_holder=self._stopping.is_set())
        if not held:
            return None
        if not self._stopping.is_set():
            waited = f"{STOP_BUSY_WAIT_SECONDS:g} s" if self._give_up_at is not None else "the busy timeout"
            return self._left_behind(lowest, f"stop waited {waited} for it")
        if self._give_up_at is not None:
            return self._left_behind(lowest, "stop now ended the wait for it")
        return self._left_behind(lowest, "stop, before the daemon served, did not wait for it")

    def _left_behind(self, lowest: int | None, waited: str) -> str:
        """The line :meth:`last_catch_up` returns: the projections are behind the log because
        another process holds ``projections.db``, and how far when that could be read."""
        far = f" (folded to seq {lowest}; the log ends at seq {self.store.last_seq})" if lowest is not None else ""
        return (f"lens: the projections were left behind the log{far}: projections.db is held by another process "
                f"(a `lens log rebuild`?) and the {waited}; the next start folds the rest (the log has every event)")

    async def _behind_and_held(self, *, look_for_holder: bool) -> tuple[int | None, bool]:
        """The projections' lowest position as committed (``None``: it could not be read), and
        whether they are behind the log because another process holds ``projections.db``: the last
        catch-up failed for that, or (``look_for_holder``) a write transaction cannot be begun now.

        Neither waits for the held file: a read of a WAL file takes no lock the holder's write
        transaction has, and once the stop gave up waiting the busy handler answers at once
        (:meth:`_busy_wait`), so a ``BEGIN IMMEDIATE`` fails at once while another process holds it."""
        projector, busy, last = self.projector, self._busy, self.store.last_seq

        def look() -> tuple[int | None, bool]:
            try:
                lowest = min(projector.position(name) for name in projector.projections)
            except (LogError, apsw.Error, ValueError) as exc:  # (damaged, unreadable, no projection)
                log.debug("projections' positions not read at the stop: %r", exc)
                lowest = None
            if lowest is not None and lowest >= last:
                return lowest, False  # (caught up: nothing was left behind)
            if busy or not look_for_holder:
                return lowest, busy
            try:
                projector.conn.execute("BEGIN IMMEDIATE")
                projector.conn.execute("ROLLBACK")  # (nothing written: only whether it could begin)
            except apsw.BusyError:
                return lowest, True
            except apsw.Error:
                return lowest, False
            return lowest, False

        return await trio.to_thread.run_sync(look, limiter=self._write_limiter)

    def close(self) -> None:
        self.projector.close()
        self.projector.reader.close()
        self._read_conn.close()

    async def _catch_up(self) -> None:
        target = self.store.last_seq
        before, self._busy = self.error, False
        try:
            def work() -> tuple[int, int] | None:
                self.projector.catch_up(None, self._stop_point)
                return _identity(self._path)  # (a stat, off the event loop with the catch-up)

            found = await trio.to_thread.run_sync(work, limiter=self._write_limiter)
        except _CatchUpStopped:
            await trio.lowlevel.checkpoint()  # (cancelled by now: the daemon is stopping)
            return
        except apsw.BusyError:  # (after the busy timeout)
            if self._stopping.is_set():  # (given up by stop(): the next start goes on from here)
                self._busy = True  # (last_catch_up says what the stop left behind, and why)
                await trio.lowlevel.checkpoint()
                return
            self.error = ("projections.db is held by another process (a `lens log rebuild`?); "
                          "the projections go on once it lets go")
            self._busy = True
            # (said once while it lasts, as below: it is tried again every BUSY_RETRY_SECONDS)
            log.log(logging.DEBUG if self.error == before else logging.WARNING, "projector waiting: %s", self.error)
        except (LensError, apsw.Error, Exception) as exc:  # contained: lists report it, the daemon lives
            self.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, STORAGE_ERRORS):  # (SQLite's "disk I/O error" says nothing of which file)
                self.error = (f"projections.db could not be updated ({self.error}; the disk may be full, read-only "
                              f"or failing); tried again until it can be")
            # Said once while it fails the same way: the retries (every 30 s at most) repeated it
            # to the daemon's log for as long as the fault lasted, and nothing said when it ended.
            log.log(logging.DEBUG if self.error == before else logging.ERROR, "projections behind the log: %s",
                    self.error)
        else:
            self.error = None
            self.position = max(self.position, target)
            self._check_file(found)
            if before is not None:
                log.info("projections caught up with the log again (at seq %d)", self.position)
        ev, self._advanced = self._advanced, trio.Event()
        ev.set()  # readers waiting see the new position, or the error, now

    def _check_file(self, found: tuple[int, int] | None) -> None:
        """Say once, in the daemon's log, that ``projections.db`` was deleted (or replaced) while
        the daemon runs. Its connections keep the file they opened: the projections and snapshots
        go on there, correct and complete, and the next start rebuilds ``projections.db`` from
        the log. Until then ``lens log`` commands cannot open it (PROJECTIONS_DELETED_WHILE_OPEN)."""
        if self._file is None or found == self._file:
            return
        self._file = None
        log.warning("%s was deleted or replaced while the daemon runs: the daemon goes on with the copy it "
                    "holds open (nothing is lost: it derives from the event log); at its next start it rebuilds "
                    "the projections from the log if the file is gone, and `lens log` commands cannot open a "
                    "deleted one until then", self._path)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._first_done = first_done = trio.Event()
        # The first catch-up comes before started: sessions woken at start (and HTTP) need the
        # projects table (a session's model request reads its project's workspace from it).
        # After projections.db was deleted, or a projection's version changed, that is a refold
        # of the whole log, and the daemon listens only once it is done.
        await self._catch_up()
        first_done.set()
        task_status.started()
        seen = self.position
        pause = RETRY_FIRST_SECONDS
        while True:
            if self.error is None:
                pause = RETRY_FIRST_SECONDS
                try:
                    seen = await self.store.wait_for(seen)
                except StoreClosed:
                    return  # (the daemon is stopping)
            else:
                # Try again after a pause that grows while it keeps failing, new commit or not: a
                # failure that passes on its own (another process let go of projections.db) must
                # not leave every list answering "stalled" until some new event happens to be
                # written, nor a row that cannot be projected make it spin. A held projections.db
                # was already waited for (the busy timeout): try again soon, so the lists come
                # back within a second of the rebuild's end, not up to RETRY_MAX_SECONDS later.
                if self._busy:
                    await trio.sleep(BUSY_RETRY_SECONDS)
                else:
                    await trio.sleep(pause)
                    pause = min(pause * 2, RETRY_MAX_SECONDS)
            await self._catch_up()

    async def caught_up(self, seq: int | None = None, timeout: float = 10.0) -> None:
        target = self.store.last_seq if seq is None else seq
        with trio.move_on_after(timeout):
            while self.position < target:
                if self.error is not None:
                    raise ProjectionStalled(f"projections are behind the log: {self.error}")
                await self._advanced.wait()
            return
        raise ProjectionStalled(f"projections are catching up with the log (at seq {self.position} of {target}); "
                                f"try again shortly")

    async def sessions_with_pending_work(self) -> list[str] | None:
        """Sessions with a task running or inputs queued, for the supervisor to wake at start.

        Read from the sessions projection (one row per session) instead of a scan of the whole
        log, plus every session with task or input events past the projected position: a superset
        there (waking a session with nothing to do costs one replay). ``None`` when projections
        are stalled or unreadable: the caller then scans the log.
        """
        with trio.move_on_after(FIRST_CATCH_UP_WAIT_SECONDS):
            await self._first_done.wait()
        if self.error is not None or not self._first_done.is_set():
            return None  # (still refolding the whole log: the scan is quicker than waiting)
        position = self.position  # every event up to here is projected
        try:
            projected = await self.query(PENDING_SESSIONS_SQL)
        except ProjectionsUnreadable as exc:
            log.warning("sessions projection unreadable (%s); scanning the log for pending work", exc)
            return None
        conn = self.projector.reader.conn  # the projector's own log connection, under its limiter
        try:
            tail = await trio.to_thread.run_sync(lambda: list(conn.execute(UNPROJECTED_WORK_SQL, (position,))),
                                                 limiter=self._write_limiter)
        except apsw.Error:
            return None  # the scan of the log then names the problem
        return sorted({r[0] for r in projected} | {r[0] for r in tail if r[0] is not None})

    async def saved_default_model(self) -> tuple[str | None, int] | None:
        """The saved default model (``default_model.set``, F-MOD-5) and the ``seq`` that set it
        (``(None, 0)``: never saved), for the daemon at start.

        Read from the settings projection (one row), plus the seq range past the projected
        position for a later event of that kind (none, as a rule: the first catch-up ran); that
        one event is then read from the log. ``None`` when projections are stalled or
        unreadable: the caller then scans the log.
        """
        with trio.move_on_after(FIRST_CATCH_UP_WAIT_SECONDS):
            await self._first_done.wait()
        if self.error is not None or not self._first_done.is_set():
            return None
        position = self.position
        try:
            rows = await self.query("SELECT value, seq FROM settings WHERE key = ?", (DEFAULT_MODEL_KEY,))
        except ProjectionsUnreadable as exc:
            log.warning("settings projection unreadable (%s); scanning the log for the saved default model", exc)
            return None
        saved: tuple[str | None, int] = (None, 0)
        if rows and (rows[0][0] is None or type(rows[0][0]) is str) and type(rows[0][1]) is int:
            saved = (rows[0][0], rows[0][1])
        elif rows:
            return None  # (edited by hand: the log says)
        conn = self.projector.reader.conn
        try:
            tail = await trio.to_thread.run_sync(
                lambda: [r[0] for r in conn.execute(UNPROJECTED_DEFAULT_MODEL_SQL, (max(position, saved[1]),))],
                limiter=self._write_limiter)
        except apsw.Error:
            return None
        if tail:
            events = await self.store.read_events(after=max(tail) - 1, to=max(tail), limit=1)
            ev = events[0].event if events else None
            if not isinstance(ev, DefaultModelSet):
                return None
            saved = (ev.model, events[0].seq)
        return saved

    async def named_artifacts(self, ids: list[str]) -> set[str]:
        """Those of ``ids`` that some event projected so far names (the start-up sweep of
        ``artifacts/`` keeps them); raises ``PROJECTIONS_UNREADABLE`` if the read fails."""
        conn = self._read_conn
        try:
            return await trio.to_thread.run_sync(ArtifactNames.named, conn, ids, limiter=self._read_limiter)
        except apsw.Error as exc:
            raise _unreadable(exc) from None

    async def artifact_type(self, aid: str) -> str | None:
        """The type ``aid`` was first stored with (``artifact.stored``), once the projections
        have caught up with the log; ``None`` if no event stored it. Raises
        ``PROJECTION_STALLED`` or ``PROJECTIONS_UNREADABLE``."""
        await self.caught_up()
        conn = self._read_conn
        try:
            return await trio.to_thread.run_sync(ArtifactTypes.type_of, conn, aid, limiter=self._read_limiter)
        except apsw.Error as exc:
            raise _unreadable(exc) from None

    async def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple]:
        """Rows of a read of ``projections.db``; raises ``PROJECTIONS_UNREADABLE`` if it fails."""
        def run() -> list[tuple]:
            return list(self._read_conn.execute(sql, args))

        try:
            return await trio.to_thread.run_sync(run, limiter=self._read_limiter)
        except apsw.Error as exc:
            raise _unreadable(exc) from None

    # ------------------------------------------------------------------ history (tools and HTTP)

    async def history_search(self, project_id: str, query: str, *, session_id: str | None = None,
                             agent_id: str | None = None, task_id: str | None = None,
                             after_item_id: str | None = None, limit: int = 20,
                             cursor_name: str = "after_context_item_id",
                             leave_out: str | None = None) -> tuple[list[Any], str | None]:
        await self.caught_up()
        index = self._history_index

        def run() -> tuple[list[Any], str | None]:
            return index.search(project_id, query, session_id=session_id, agent_id=agent_id, task_id=task_id,
                                after_item_id=after_item_id, limit=limit, cursor_name=cursor_name,
                                leave_out=leave_out)

        return await self._history(run)

    async def project_has_session(self, project_id: str, session_id: str) -> bool:
        """Whether ``session_id`` is one of the project's sessions (a deleted one too), once the
        projections have caught up: what a search filtered by a session must name."""
        await self.caught_up()
        rows = await self.query("SELECT project_id FROM sessions WHERE id = ?", (session_id,))
        return bool(rows) and rows[0][0] == project_id

    async def history_read(self, item_id: str, *, project_id: str | None = None, offset: int = 0,
                           limit: int = 16384) -> dict[str, Any]:
        await self.caught_up()
        index = self._history_index
        return await self._history(lambda: index.read(item_id, project_id=project_id, offset=offset, limit=limit))

    async def _history(self, fn: Any) -> Any:
        """Run a history query off the trio thread; raises :class:`HistoryError` (stable codes)."""
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._read_limiter)
        except apsw.Error as exc:
            raise _unreadable(exc) from None


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; ``None`` when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
