"""The sweeps of ``artifacts/``: the files no event names go, at start and while serving.

An artifact is stored before the event that names it is appended (a tool stores what it
returns, then the actor records the call's result). When that append never happens (the log
refused the result, the daemon stopped or was killed in between, a ``put_together`` cancelled
from the event loop ran on to its end) the file stays, named by nothing; so does the temporary
file of a write a kill interrupted. The daemon removes both at start, before any session wakes
and before HTTP listens: no call of this daemon can be storing an artifact then, and the store's
lock keeps every other daemon out of the directory. Only files changed before the start are
looked at, and only once the projections have folded the whole log, whose
:class:`~projections.artifact_names.ArtifactNames` says which ids some event names: the log is
not read again. An id any event names stays, whatever its session's state (artifacts are shared
by content). When the directory cannot be read, the projections are behind or a removal fails,
nothing more is removed and the operator is told; the daemon starts all the same.

While the daemon serves, :class:`ArtifactSweeper` sweeps again every :data:`LIVE_SWEEP_SECONDS`
and soon after a tool call whose stored artifacts were not recorded (a refused or failed
append), at most once every :data:`LIVE_SWEEP_GAP_SECONDS`. Calls are storing artifacts then,
so a live sweep (:func:`sweep_live`) keeps every id the store holds in flight (stored by work
whose event has not committed or failed yet) and every id put or released since it began; it
reads the log's last seq after it began, waits for the projections to fold up to it, and only
then asks which ids are named, so an event committed before that seq is seen and one committed
after it had its id held or touched while the sweep ran. It also ends the holds "for good"
(``ArtifactStore.release_named``) of the ids the log now names, so that set stays as small as
the events still to come.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from tools.artifacts import ArtifactStore

from .atomicfile import why_not_written
from .errors import LensError
from .projection_service import ProjectionService

log = logging.getLogger("lens.artifacts")

# A live sweep lists the directory and looks every id up (7 to 20 µs an artifact): every ten
# minutes, and after a failed append at most once a minute, it costs nothing a user sees.
LIVE_SWEEP_SECONDS = 600.0
LIVE_SWEEP_GAP_SECONDS = 60.0
# How long a live sweep waits for the projections to fold the log up to where it began.
LIVE_SWEEP_CATCH_UP_SECONDS = 30.0


@dataclass
class Swept:
    """What a sweep did: the artifacts and partial files removed, and notes for the operator."""

    artifacts: int = 0
    partial: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self, where: str) -> list[str]:
        """The daemon's lines about it (none when there was nothing to remove)."""
        out = []
        if self.artifacts or self.partial:
            out.append(f"lens: removed {self.artifacts} artifact(s) no event names and {self.partial} partial "
                       f"file(s) of interrupted writes from {where}")
        out.extend(f"lens: note: {note}" for note in self.notes)
        return out


async def sweep_artifacts(artifacts: ArtifactStore, projections: ProjectionService, log_seq: int,
                          started_ns: int) -> Swept:
    """Remove from ``artifacts`` the files changed before ``started_ns`` that no event up to
    ``log_seq`` (the log's last seq, nothing appended since) names, and the partial files of
    interrupted writes. Raises nothing but ``trio.Cancelled``: every failure becomes a note."""
    swept = Swept()
    where = artifacts.root
    if projections.error is not None or projections.position < log_seq:
        swept.notes.append(f"{where} was not swept: the projections are behind the log "
                           f"({projections.error or f'at seq {projections.position} of {log_seq}'}); "
                           f"files no event names stay until a start with them caught up")
        return swept
    try:
        found = await trio.to_thread.run_sync(artifacts.leftovers, started_ns)
    except OSError as exc:
        swept.notes.append(f"{where} cannot be read ({why_not_written(exc)}); nothing in it was removed, and "
                           f"artifacts may not be stored or served until it is a readable directory again")
        return swept
    try:
        named = await projections.named_artifacts(found.artifacts)
    except LensError as exc:
        swept.notes.append(f"{where} was not swept: which artifacts the log names could not be read "
                           f"({exc.code}: {exc.message})")
        return swept
    unnamed = [a for a in found.artifacts if a not in named]
    if not unnamed and not found.partial:
        return swept
    try:
        kept, failed = await trio.to_thread.run_sync(artifacts.remove, [*unnamed, *found.partial])
    except OSError as exc:  # (the directory's sync: the files are unlinked, their removal may not last)
        kept, failed = [], []
        swept.notes.append(f"{where}: removing files no event names could not be made durable "
                           f"({why_not_written(exc)})")
    gone = {name for name, _ in failed} | set(kept)  # (kept: in flight, their event still to come)
    swept.artifacts = sum(a not in gone for a in unnamed)
    swept.partial = sum(p not in gone for p in found.partial)
    if failed:
        name, exc = failed[0]
        swept.notes.append(f"{len(failed)} file(s) no event names could not be removed from {where}, "
                           f"e.g. {name} ({why_not_written(exc)}); they stay")
    log.info("artifact sweep: %d artifact(s), %d partial file(s) removed, %d failed",
             swept.artifacts, swept.partial, len(failed))
    return swept


async def sweep_live(artifacts: ArtifactStore, projections: ProjectionService, last_seq: Callable[[], int]) -> Swept:
    """A sweep while the daemon serves (see the module's docstring): ``last_seq`` answers the
    log's last committed seq. Raises nothing but ``trio.Cancelled``."""
    with artifacts.sweeping() as began_ns:
        log_seq = last_seq()  # (read after the sweep began: see ArtifactStore.sweeping)
        try:
            await projections.caught_up(log_seq, timeout=LIVE_SWEEP_CATCH_UP_SECONDS)
        except LensError as exc:
            return Swept(notes=[f"{artifacts.root} was not swept: {exc.message}"])
        # The ids held for good whose event has come need no hold: named, they are never taken.
        # (What the lookup fails on, the sweep's own lookup below says.)
        held = artifacts.held_for_good()
        if held:
            try:
                artifacts.release_named(await projections.named_artifacts(sorted(held)))
            except LensError:
                pass
        return await sweep_artifacts(artifacts, projections, log_seq, began_ns)


class ArtifactSweeper:
    """The live sweeps of one daemon: every :data:`LIVE_SWEEP_SECONDS`, and when a lease ended
    with artifacts its event did not record, at once unless the last sweep for such a lease
    was less than :data:`LIVE_SWEEP_GAP_SECONDS` ago (then at that gap's end). ``say`` gets the lines of a sweep that
    removed something or has a note. :meth:`run` is a service for the daemon's nursery."""

    def __init__(self, artifacts: ArtifactStore, projections: ProjectionService, last_seq: Callable[[], int],
                 say: Callable[[str], None], *, every: float = LIVE_SWEEP_SECONDS,
                 gap: float = LIVE_SWEEP_GAP_SECONDS) -> None:
        self.artifacts = artifacts
        self.projections = projections
        self.last_seq = last_seq
        self.say = say
        self.every = every
        self.gap = gap
        self.sweeps = 0  # (finished: what a test waits on)
        self.swept = trio.Event()  # set after each sweep, then replaced
        self._poke = trio.Event()

    def poke(self) -> None:
        """Ask for a sweep soon (a lease ended holding artifacts its event did not record)."""
        self._poke.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        remove = self.artifacts.on_orphans(self.poke)
        try:
            task_status.started()
            last = trio.current_time()  # (the start's sweep)
            after_failure = -float("inf")  # (the first result not recorded is swept at once)
            while True:
                with trio.move_on_at(last + self.every):
                    await self._poke.wait()
                    await trio.sleep_until(after_failure + self.gap)  # (a burst of failures: one sweep)
                    after_failure = trio.current_time()
                self._poke = trio.Event()
                swept = await sweep_live(self.artifacts, self.projections, self.last_seq)
                for line in swept.lines(str(self.artifacts.root)):
                    self.say(line)
                last = trio.current_time()
                self.sweeps += 1
                self.swept.set()
                self.swept = trio.Event()
        finally:
            remove()
