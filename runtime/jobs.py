"""Background jobs of one session (F-HAR-2): commands that run on while the agent goes on.

A :class:`SessionJobs` belongs to one :class:`~runtime.actor.SessionActor` and runs each job as a
task of the actor's nursery (nothing outlives the actor that started it). What is durable is in
the log: ``job.started`` when a job starts, ``job.finished`` (with the last
:data:`TAIL_BYTES` of its output) when it ends, and with that finish an input
(``input.submitted``, request id ``job:<job id>``, a follow-up) that reports the end to the main
agent and so starts a new round. The output itself is kept in memory only, in a ring of the last
:data:`OUTPUT_RING_BYTES`, readable while the job runs and, for the last :data:`FINISHED_KEPT`
jobs, after it ended (until the session's actor passivates).

A graceful stop of the daemon (SIGINT/SIGTERM/SIGHUP) ends each running job's command and records the
job ``stopped`` with the output it had, within :data:`STOP_RECORD_SECONDS` (the store still takes
appends while the services stop); the report waits in the log for the session's next run. An
actor that wakes up (a daemon restart, an actor restart) and finds jobs the log shows running
records them ``lost`` and reports that: their commands ended with the run that owned them (the
executor kills a command whose caller went away; a local executor child dies with the daemon).
That is what a kill -9 leaves, and a stop whose record could not be made in time (a disk stall).

Errors (``LensError`` codes): ``JOB_NOT_FOUND``, ``JOB_FINISHED`` (stop of a job that ended),
``JOB_LIMIT`` (more than :data:`MAX_RUNNING_JOBS` at once), ``JOBS_UNAVAILABLE`` (a start while the
session's jobs are not running), ``SESSION_DELETED``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import trio

from events import types as t
from events.secrets import Secrets
from projections.session_state import MAIN_AGENT, JobRecord, SessionState, running_jobs

from . import decide as d
from tools.artifacts import ArtifactError, ArtifactStore

from .errors import JobNotFound, JobNotRunning, LensError, SessionGone
from .stop_now import StopNow

log = logging.getLogger("lens.jobs")

MAX_RUNNING_JOBS = 8  # per session
OUTPUT_RING_BYTES = 1024 * 1024  # the output kept in memory per job (the latest this many bytes)
TAIL_BYTES = 4096  # recorded in job.finished and shown in the report
FINISHED_KEPT = 8  # finished jobs whose full ring stays readable while the actor lives
REPORT_COMMAND_CHARS = 200  # of the command, in the report
# How long a graceful stop waits for a running job's end to be recorded (all jobs at once);
# past it the record is given up and the next start records the job ``lost``.
STOP_RECORD_SECONDS = 3.0
STOPPED_BY_DAEMON = "Lens was stopped while the job ran; its command was ended with it"
SAVED_OUTPUT_MIME = "text/plain; charset=utf-8"  # a job's output saved at a stop (an artifact)


class JobLimit(LensError):
    code = "JOB_LIMIT"


class JobsUnavailable(LensError):
    """A start while the session's jobs are not running (before ``run`` or after it ended): the
    code the ``job`` tool gives a session that cannot run background jobs."""

    code = "JOBS_UNAVAILABLE"


@dataclass(frozen=True)
class JobExit:
    """How a job's command ended, as the executor says."""

    exit_code: int
    timed_out: bool = False
    timeout_ms: int = 0
    truncated: bool = False  # the executor dropped output past its cap per command


# A job's command: writes its output to the sink as it comes, returns its exit (None: the
# executor's stream ended without one). Raises LensError when the executor fails.
JobRun = Callable[[Callable[[bytes], None]], Awaitable[JobExit | None]]


# --------------------------------------------------------------------------- output


class OutputRing:
    """The latest ``cap`` bytes of a job's output, addressed by absolute byte offsets."""

    def __init__(self, cap: int = OUTPUT_RING_BYTES) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.start = 0  # the absolute offset of buf[0]; everything before was dropped

    @property
    def total(self) -> int:
        return self.start + len(self.buf)

    def write(self, data: bytes) -> None:
        if len(data) >= self.cap:
            self.start += len(self.buf) + len(data) - self.cap
            self.buf = bytearray(data[-self.cap:])
            return
        self.buf += data
        over = len(self.buf) - self.cap
        if over > 0:
            del self.buf[:over]
            self.start += over

    def read(self, offset: int, limit: int, *, final: bool) -> tuple[str, int, int]:
        """Text from ``offset`` (or the oldest byte kept, if later): ``(text, from, next)``.

        Never splits a UTF-8 character: the start moves past continuation bytes, and an end
        inside a character moves back before it (unless the output is ``final`` and ends there);
        a ``limit`` smaller than the first character still returns that character, so a reader
        always advances. Invalid bytes read as U+FFFD."""
        begin = max(offset, self.start)
        if begin >= self.total:
            return "", self.total, self.total
        i = self._char_start(begin - self.start)
        end = min(i + limit, len(self.buf))
        if end < len(self.buf) or not final:
            end = _complete_end(self.buf, i, end)
        if end == i < len(self.buf):  # the first character is longer than limit
            whole = i + _char_len(self.buf[i])
            end = whole if whole <= len(self.buf) else (len(self.buf) if final else i)
        return bytes(self.buf[i:end]).decode("utf-8", errors="replace"), self.start + i, self.start + end

    def tail(self, n: int = TAIL_BYTES) -> str:
        return bytes(self.buf[self._char_start(max(len(self.buf) - n, 0)):]).decode("utf-8", errors="replace")

    def tail_start(self, n: int = TAIL_BYTES) -> int:
        """Where :meth:`tail` begins, as an offset of the whole output."""
        return self.start + self._char_start(max(len(self.buf) - n, 0))

    def _char_start(self, i: int) -> int:
        """``i``, or past the continuation bytes there when they end a character that began
        before ``i`` (or before what is kept). Stray continuation bytes (output that is not
        UTF-8) are no character's middle: they stay, so pages add up to the whole output."""
        if i >= len(self.buf) or not _is_continuation(self.buf[i]):
            return i
        j = i - 1
        while j >= 0 and j > i - 4 and _is_continuation(self.buf[j]):
            j -= 1
        inside = (j + _char_len(self.buf[j]) > i and not _is_continuation(self.buf[j])) if j >= 0 and j > i - 4 \
            else (j < 0 and self.start > 0 and i < 3)  # (a lead dropped from the ring may reach i)
        if not inside:
            return i
        k = i
        while k < len(self.buf) and k - i < 3 and _is_continuation(self.buf[k]):
            k += 1
        return k


def _is_continuation(b: int) -> bool:
    return b & 0xC0 == 0x80


def _char_len(b: int) -> int:
    """The length of the UTF-8 sequence lead byte ``b`` starts (1 for a byte that starts none)."""
    return 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4 if b >> 3 == 0b11110 else 1


def _complete_end(buf: bytearray, lo: int, end: int) -> int:
    """``end``, or the start of a character it would cut (a lead byte whose sequence passes it)."""
    j = end - 1
    while j >= lo and j >= end - 4:
        if not _is_continuation(buf[j]):
            return end if j + _char_len(buf[j]) <= end else j
        j -= 1
    return end


# --------------------------------------------------------------------------- one session's jobs


@dataclass
class LiveJob:
    job_id: str
    ring: OutputRing = field(default_factory=OutputRing)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    stop_reason: str | None = None
    by_delete: bool = False  # stopped by the session's delete: its end is recorded with no report
    abandoned: bool = False  # the actor is going away: record nothing (its next wake says "lost")
    truncated: bool = False  # the executor cut the output at its cap (where no key was known)


Emit = Callable[..., Awaitable[Any]]


class SessionJobs:
    """The background jobs of one session actor.

    ``emit`` is the actor's ``_emit`` (decisions under its write lock), ``state`` returns its
    current state, ``wake`` starts its runner when inputs wait (the report of a finished job).
    """

    def __init__(self, session_id: str, *, emit: Emit, state: Callable[[], SessionState],
                 new_id: Callable[[str], str], wake: Callable[[], None], secrets: Secrets | None = None,
                 stopping: trio.Event | None = None, artifacts: ArtifactStore | None = None,
                 stop_now: StopNow | None = None) -> None:
        self.session_id = session_id
        # Where a graceful stop saves a job's output (None: only the tail is recorded).
        self._artifacts = artifacts
        # The daemon's stop: set, a cancellation of a job is the daemon stopping gracefully (its
        # end is recorded); unset, it is the actor crashing or going away (nothing is recorded).
        self._stopping = stopping
        # A second stop signal: the end's record is given up at once (the next start says lost).
        self._stop_now = stop_now if stop_now is not None else StopNow()
        self._secrets = secrets or Secrets()  # (the recorded tail is cut where no key was known)
        self._emit = emit
        self._state = state
        self._new_id = new_id
        self._wake = wake
        self._nursery: trio.Nursery | None = None
        self.live: dict[str, LiveJob] = {}
        self._finished: OrderedDict[str, LiveJob] = OrderedDict()
        self._closing: str | None = None  # stop_all's reason: no job starts any more
        self._closing_by_delete = False  # stop_all's ``deleted``: what it stops is not reported

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @property
    def running(self) -> int:
        """How many jobs this actor runs now (an actor with jobs running must not passivate)."""
        return len(self.live)

    # ------------------------------------------------------------------ start / stop

    async def start(self, command: str, run: JobRun, *, call_id: str | None, agent_id: str = MAIN_AGENT,
                    task_id: str | None = None) -> dict[str, Any]:
        """Record ``job.started`` and run ``run`` in the background; returns ``{job_id, status}``.

        Raises ``JOB_LIMIT`` when :data:`MAX_RUNNING_JOBS` run already (checked under the write
        lock, so two starts at once cannot both pass it)."""
        if self._nursery is None:
            raise JobsUnavailable("this session cannot run background jobs: its jobs are not running")
        job_id = self._new_id("job")

        def decide_start() -> list[d.Scoped]:
            state = self._state()
            if state.deleted or self._closing is not None:
                raise SessionGone.of(self.session_id)
            n = len(running_jobs(state))
            if n >= MAX_RUNNING_JOBS:
                raise JobLimit(f"{n} jobs run in this session already (at most {MAX_RUNNING_JOBS} at once); "
                               f"stop one or wait for one to finish")
            return [d.Scoped(t.JobStarted(job_id=job_id, command=command, call_id=call_id), agent_id, task_id)]

        await self._emit(decide_start)
        live = self.live[job_id] = LiveJob(job_id)
        if self._closing is not None:  # stop_all began while job.started was written: stop it too
            live.stop_reason, live.by_delete = self._closing, self._closing_by_delete
            live.scope.cancel()
        self._nursery.start_soon(self._run, live, run)
        return {"job_id": job_id, "status": "running"}

    async def stop(self, job_id: str, reason: str = "stopped by request") -> dict[str, Any]:
        """Stop a running job and wait until its end is recorded; returns its record.

        Raises ``JOB_NOT_FOUND`` and ``JOB_FINISHED`` (it ended already; the message says how)."""
        rec = self._record(job_id)
        live = self.live.get(job_id)
        if rec.status != "running" or live is None:
            raise JobNotRunning(f"job {job_id!r} is not running (it {_ended(rec)})")
        if live.stop_reason is None:
            live.stop_reason = reason
        live.scope.cancel()
        await live.done.wait()
        return self.describe(self._record(job_id))

    async def stop_all(self, reason: str, *, deleted: bool = False) -> None:
        """Stop every job and wait until each end is recorded; no job starts after this is
        called (a session delete: the agent's run goes on until the delete aborts it, and a job
        it started meanwhile would otherwise run on in the deleted session). ``deleted``: the
        session's delete stops them, so the ends it records are not reported to the agent
        (nothing would run the report)."""
        self._closing, self._closing_by_delete = reason, deleted
        while self.live:
            for live in list(self.live.values()):
                if live.stop_reason is None:
                    live.stop_reason = reason
                # (also a job whose stop was under way: its end is recorded after the delete began)
                live.by_delete = live.by_delete or deleted
                live.scope.cancel()
            for live in list(self.live.values()):
                await live.done.wait()

    def abandon(self) -> None:
        """The actor is going away: end every job's command without recording anything (the next
        wake records them ``lost``)."""
        for live in self.live.values():
            live.abandoned = True
            live.scope.cancel()

    async def record_lost(self) -> None:
        """On wake-up: jobs the log shows running belong to a run that is gone; record them
        ``lost`` and report that to the agent, one append each (each report has its request id)."""
        for rec in running_jobs(self._state()):
            if rec.job_id in self.live:
                continue
            await self._record_end(rec.job_id, "lost", None,
                                   "Lens restarted while the job ran; how its command ended was not recorded",
                                   rec.output_tail)

    # ------------------------------------------------------------------ reading

    def _record(self, job_id: str) -> JobRecord:
        rec = self._state().jobs.get(job_id)
        if rec is None:
            raise JobNotFound(f"session {self.session_id!r} has no job {job_id!r}")
        return rec

    def describe(self, rec: JobRecord) -> dict[str, Any]:
        """One job: its record, and how much output is held in memory."""
        live = self.live.get(rec.job_id) or self._finished.get(rec.job_id)
        return {"job_id": rec.job_id, "command": rec.command, "status": rec.status, "exit_code": rec.exit_code,
                "reason": rec.reason, "call_id": rec.call_id, "started_seq": rec.started_seq,
                "finished_seq": rec.finished_seq,
                "output_bytes": live.ring.total if live is not None else None}

    def list(self) -> list[dict[str, Any]]:
        return [self.describe(rec) for rec in self._state().jobs.values()]

    async def read(self, job_id: str, offset: int = 0, limit: int = 65536) -> dict[str, Any]:
        """The job and its output from ``offset`` (bytes of its whole output), at most ``limit``
        bytes. While the actor holds the output (running, or among the last finished): from the
        ring (``source: memory``; ``dropped_before`` is where what is kept begins). Otherwise,
        for a job a graceful stop ended, the output it saved (``source: saved``, offsets of the
        whole output as in memory; an artifact that cannot be read falls back to the tail, with
        a warning in the daemon's log); else the recorded tail (``source: tail``,
        ``dropped_before`` where it began in the whole output and offsets from there, counted in
        the tail's text — the output's bytes unless it held invalid UTF-8, a key or a cut; from 0
        when ``job.finished`` did not say where it began). The page is scrubbed of the
        keys the daemon knows; one that ends in what could begin a key ends before it
        (``Secrets.scrub_page``), and one that starts where the ring dropped older output
        leaves out what could end one: the route and the ``job`` tool show the same page."""
        rec = self._record(job_id)
        out = self.describe(rec)
        live = self.live.get(job_id) or self._finished.get(job_id)
        if live is not None:
            final = rec.status != "running"
            text, begin, nxt = live.ring.read(offset, limit, final=final)
            text = self._secrets.mend(text, cut_start=begin == live.ring.start > 0,
                                      cut_end=live.truncated and nxt >= live.ring.total)
            text, nxt, eof = self._secrets.scrub_page(text, nxt, final and nxt >= live.ring.total)
            out.update(output=text, offset=begin, next_offset=nxt, dropped_before=live.ring.start,
                       eof=eof, source="memory")
            return out
        source, data = "tail", rec.output_tail.encode()
        dropped = rec.output_tail_start or 0  # (where the tail begins; 0 in a log that did not say)
        if rec.output_artifact_id and self._artifacts is not None:
            try:  # (off the event loop: up to OUTPUT_RING_BYTES and their SHA-256)
                data = await trio.to_thread.run_sync(self._artifacts.get, rec.output_artifact_id)
                source, dropped = "saved", rec.output_dropped
            except ArtifactError as exc:
                log.warning("session %s: the saved output of job %s cannot be read (%s); its tail is read instead",
                            self.session_id, job_id, exc.message)
        ring = OutputRing(max(len(data), 1))
        ring.start = dropped  # (absolute offsets: the output before it was no longer held)
        ring.write(data)
        text, begin, nxt = ring.read(offset, limit, final=True)
        text, nxt, eof = self._secrets.scrub_page(text, nxt, rec.status != "running" and nxt >= ring.total)
        out.update(output=text, offset=begin, next_offset=nxt, dropped_before=dropped, eof=eof, source=source)
        return out

    # ------------------------------------------------------------------ the job's task

    async def _run(self, live: LiveJob, run: JobRun) -> None:
        try:
            status, code, reason = "crashed", None, ""
            try:
                with live.scope:
                    ended = await run(live.ring.write)
                    if ended is None:
                        reason = "COMMAND_LOST: the executor's stream ended without an exit status"
                    elif ended.timed_out:
                        status, code, reason = "stopped", ended.exit_code, f"timed out after {ended.timeout_ms} ms"
                    elif ended.exit_code < 0:
                        code, reason = ended.exit_code, f"killed by signal {-ended.exit_code}"
                    else:
                        status, code = "exited", ended.exit_code
                    if ended is not None and ended.truncated:
                        live.truncated = True
                        dropped = "the executor kept no output past its cap per command"
                        reason = f"{reason}; {dropped}" if reason else dropped
            except LensError as exc:
                reason = self._secrets.cut(f"{exc.code}: {exc.message}", 2000)  # (keys whole before the cut)
            except trio.Cancelled:
                if self._stopping is not None and self._stopping.is_set() and not live.abandoned:
                    # The daemon stops gracefully: its store takes appends until the services
                    # have ended, so the end is recorded now, bounded (a stalled disk leaves it
                    # to the next start, which records the job lost). No wake: the report waits
                    # in the log, and the next start runs the session for it.
                    with self._stop_now.grace(STOP_RECORD_SECONDS, shield=True) as cs:
                        try:
                            saved = await self._save_output(live)
                            tail, tail_start = self._tail(live)
                            await self._record_end(live.job_id, "stopped", None, STOPPED_BY_DAEMON,
                                                   tail, wake=False, within=STOP_RECORD_SECONDS,
                                                   saved=saved, tail_start=tail_start)
                        except Exception as exc:  # (the store refused or failed: the next start says lost)
                            log.warning("session %s: job %s's end at the stop was not recorded: %r",
                                        self.session_id, live.job_id, exc)
                    if cs.cancelled_caught:
                        why = ("a second stop signal came first" if self._stop_now.is_set()
                               else f"not within {STOP_RECORD_SECONDS:.0f} s")
                        log.warning("session %s: job %s's end at the stop was not recorded (%s); the next start "
                                    "records it lost", self.session_id, live.job_id, why)
                raise
            if live.abandoned:
                return
            if live.stop_reason is not None:
                status, code, reason = "stopped", None, live.stop_reason
            tail, tail_start = self._tail(live)
            await self._record_end(live.job_id, status, code, reason, tail, tail_start=tail_start,
                                   reported=not live.by_delete)
        finally:
            self.live.pop(live.job_id, None)
            if not live.abandoned:
                self._finished[live.job_id] = live
                while len(self._finished) > FINISHED_KEPT:
                    self._finished.popitem(last=False)
            live.done.set()

    async def _save_output(self, live: LiveJob) -> tuple[str, int, int] | None:
        """At a graceful stop: the output the ring holds (at most :data:`OUTPUT_RING_BYTES`, the
        last of it), scrubbed as the tail is, stored as an artifact when it is longer than the
        tail; ``(artifact id, its size, bytes of output before it)`` or None. A store that fails
        (a full disk) leaves the tail alone, with a warning."""
        if self._artifacts is None or live.ring.total <= TAIL_BYTES:
            return None
        text = self._secrets.mend(bytes(live.ring.buf).decode("utf-8", errors="replace"),
                                  cut_start=live.ring.start > 0, cut_end=live.truncated)
        data = text.encode()
        try:
            aid = await trio.to_thread.run_sync(self._artifacts.put, data)
        except OSError as exc:
            log.warning("session %s: job %s's output was not saved at the stop (%s); its tail is recorded",
                        self.session_id, live.job_id, exc.strerror or exc)
            return None
        return aid, len(data), live.ring.start

    def _tail(self, live: LiveJob) -> tuple[str, int]:
        """The output recorded in ``job.finished``: the ring's last :data:`TAIL_BYTES`, and where
        it begins in the whole output. The tail may begin inside a key (older output dropped) and
        end inside one (the executor's cap): the pieces those cuts left are left out (the start
        then moves past the one left out at the start), the rest scrubbed."""
        text = self._secrets.mend(live.ring.tail(), cut_end=live.truncated)
        start = live.ring.tail_start()
        if live.ring.total > TAIL_BYTES:
            gone = self._secrets.open_start(text)
            start += len(text[:gone].encode())
            text = text[gone:]
        return text, start

    async def _record_end(self, job_id: str, status: str, code: int | None, reason: str, tail: str, *,
                          wake: bool = True, within: float | None = None,
                          saved: tuple[str, int, int] | None = None, tail_start: int | None = None,
                          reported: bool = True) -> None:
        """Record the job's end and its report (one append); ``within``: give up after that many
        seconds, the append possibly still committed (a stop: the actor is going away);
        ``reported``: False records the end alone (a job the session's delete stopped; a deleted
        session's log gets no report either way);
        ``saved``: the output :meth:`_save_output` stored (with its ``artifact.stored``);
        ``tail_start``: where ``tail`` begins in the whole output (None: not known, a lost job)."""
        def decide_end() -> Sequence[d.Scoped]:
            state = self._state()
            rec = state.jobs.get(job_id)
            if rec is None or rec.status != "running":
                return []
            finished = d.Scoped(t.JobFinished(job_id=job_id, status=status, exit_code=code,  # type: ignore[arg-type]
                                              output_tail=tail, reason=reason,
                                              output_artifact_id=saved[0] if saved else None,
                                              output_dropped=saved[2] if saved else 0,
                                              output_tail_start=tail_start))
            if saved is not None:
                stored = d.Scoped(t.ArtifactStored(artifact_id=saved[0], sha256=saved[0], mime=SAVED_OUTPUT_MIME,
                                                   size=saved[1], source="job_output"))
                finished = [stored, finished]  # type: ignore[assignment]
            else:
                finished = [finished]  # type: ignore[assignment]
            if state.deleted or not reported:
                return finished  # type: ignore[return-value]
            report = t.InputSubmitted(content=[t.TextPart(report_text(rec, status, code, reason, tail,
                                                                      saved=saved is not None))],
                                      when_busy="followUp")
            # The report is an input like any other (withdrawable by its id, queued while the
            # agent runs); it comes first in the append because only the first carries the id.
            return [d.Scoped(report), *finished]  # type: ignore[misc]

        res = await self._emit(decide_end, request_id=f"job:{job_id}", within=within)
        if res is not None and res.duplicate:
            # A client's own input took that id first: nothing was written; the report goes
            # without an id of its own (``seq:<n>``) rather than never.
            await self._emit(decide_end, within=within)
        if wake:
            self._wake()


def report_text(rec: JobRecord, status: str, code: int | None, reason: str, tail: str, *,
                saved: bool = False) -> str:
    """The input that tells the agent a job ended (``saved``: its whole output was saved at a stop)."""
    command = rec.command if len(rec.command) <= REPORT_COMMAND_CHARS else rec.command[:REPORT_COMMAND_CHARS] + "…"
    lines = [f"[background job {rec.job_id} {_how(status, code)}{f' ({reason})' if reason else ''}]",
             f"command: {command}"]
    if saved:
        lines.append(f"(its output, up to the last {OUTPUT_RING_BYTES // 1024} KiB, was saved: "
                     f"job read {rec.job_id} reads it)")
    if tail:
        lines += [f"last output (up to {TAIL_BYTES} bytes):", tail]
    else:
        lines.append("(no output)")
    return "\n".join(lines)


def _how(status: str, code: int | None) -> str:
    """How a job ended, after "it" or "job …": ``exited with code 3``, ``was stopped``, ``was lost``
    (the words of its report and of a stop's refusal: "it lost" read as if it lost something)."""
    return {"exited": f"exited with code {code}", "crashed": "crashed", "stopped": "was stopped",
            "lost": "was lost"}.get(status, status)


def _ended(rec: JobRecord) -> str:
    """How a finished job ended, after "it": ``exited with code 3``, ``was lost: …``."""
    if rec.status == "exited":
        return _how(rec.status, rec.exit_code)
    return f"{_how(rec.status, rec.exit_code)}{f': {rec.reason}' if rec.reason else ''}"


# --------------------------------------------------------------------------- actor commands (HTTP)


@dataclass(frozen=True)
class ListJobs:
    pass


@dataclass(frozen=True)
class ReadJob:
    job_id: str
    offset: int = 0
    limit: int = 65536


@dataclass(frozen=True)
class StopJob:
    job_id: str


JobCommand = ListJobs | ReadJob | StopJob


async def serve_command(jobs: SessionJobs, cmd: JobCommand) -> Any:
    if isinstance(cmd, ListJobs):
        return jobs.list()
    if isinstance(cmd, ReadJob):
        return await jobs.read(cmd.job_id, cmd.offset, cmd.limit)
    return await jobs.stop(cmd.job_id)
