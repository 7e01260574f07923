"""The start-up sweep of ``artifacts/``: the files no event names go.

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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from tools.artifacts import ArtifactStore

from .atomicfile import why_not_written
from .errors import LensError
from .projection_service import ProjectionService

log = logging.getLogger("lens.artifacts")


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
        failed = await trio.to_thread.run_sync(artifacts.remove, [*unnamed, *found.partial])
    except OSError as exc:  # (the directory's sync: the files are unlinked, their removal may not last)
        failed = []
        swept.notes.append(f"{where}: removing files no event names could not be made durable "
                           f"({why_not_written(exc)})")
    gone = {name for name, _ in failed}
    swept.artifacts = sum(a not in gone for a in unnamed)
    swept.partial = sum(p not in gone for p in found.partial)
    if failed:
        name, exc = failed[0]
        swept.notes.append(f"{len(failed)} file(s) no event names could not be removed from {where}, "
                           f"e.g. {name} ({why_not_written(exc)}); they stay")
    log.info("artifact sweep: %d artifact(s), %d partial file(s) removed, %d failed",
             swept.artifacts, swept.partial, len(failed))
    return swept
