"""Workspace tools, Core side: read_file, edit_file, patch_file, view_image, revert_call, run_command.

Each call goes to the project's executor over gRPC (runtime.executors), under the executor's
execution-domain lock (reads concurrent, writes one at a time). Editing calls return the bytes
before and after; they are stored as artifacts and recorded by a ``file.edited`` event, which is
what ``revert_call`` restores from. Images are stored as artifacts; contexts keep only their ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from events import types as t
from runtime.atomicfile import why_not_written
from runtime.errors import shortened, shortened_json, shortened_names  # (imports nothing: no cycle)
from runtime.executor_client import ExecutorToolError, stop_answer, tool_outcome  # (imports tools.executor alone: no cycle)
from runtime.stop_now import StopNow

from .artifacts import ArtifactError, ArtifactStore
from .base import ToolContext, ToolError, ToolResult, ToolSpec
from .catalog_policy import within_allowlist
from .command_output import CommandEnd, StreamJoin, drain, drain_rest
from .executor import ABORT_STOP_ANSWER_WAIT_S, EDITING_CALLS
from .executor.commands import DEFAULT_TIMEOUT_MS  # (the executor's default timeout_ms)
from .rerun import EXECUTOR_FAILURES, Reached, Respawning, executor_failures, once_more_if_died
from .slot_resend import resend_while_slots_full

log = logging.getLogger("lens.tools")
MAX_COMMAND_TIMEOUT_MS = 3_600_000
MAX_COMMAND_OUTPUT = 16 * 1024 * 1024
EDITING_TOOLS = ("edit_file", "patch_file")  # the tools whose edits revert_call restores
DEFAULT_COMMAND_OUTPUT = 1024 * 1024  # the executor's default max_output_bytes
MAX_COMMAND_BYTES = 16 * 1024  # a command's text in UTF-8 (run_command and job start)
# How long an aborted run_command waits for its command's end once the executor has answered
# ``Stop`` without it (an executor built before it answered with the end, or no running command
# by that id: its exit, if any, is on its way), or from the ``Stop`` sent when ``Stop`` failed
# (an executor built before ``Stop``, unreachable): it reads the output still on its way until
# the exit; past this the stream is cancelled (and the group killed) with no exit known.
ABORT_OUTPUT_WAIT_S = 0.25


def int_arg(args: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    """The integer argument ``name`` (``default`` when absent or null, as ``read_file`` reads
    its optional arguments), from ``lo`` to ``hi``; the refusal names the value received, as
    JSON (``got 1.5``, ``got "100"``)."""
    v = args.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ToolError("INVALID_ARGUMENT", f"{name} must be an integer from {lo} to {hi}, got {shortened_json(v)}")
    return v


def signal_name(exit_code: int) -> str | None:
    """The signal that ended a command whose exit code is ``exit_code`` (the executor reports
    one killed by signal N as -N): its name (``SIGKILL``), ``SIG<N>`` for a number with no name
    here; None for a command that exited by itself."""
    if exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"SIG{-exit_code}"


async def stop_and_drain(client: Any, run_id: str, events: Any, join: StreamJoin,
                         stop_now: StopNow | None = None) -> tuple[Any | None, bool]:
    """Ask the executor to stop the command run under ``run_id`` and read its stream to the
    exit: the exit (None: the stream ended or failed first, or the wait ran out) and whether the
    stream was read to it. An exit from the ``Stop`` answer alone (the stream's not read within
    the wait) says how the command ended, but not that all it printed was read: the output may
    lack its end, and the caller marks it cut.

    The executor answers ``Stop`` once the command's run is over (``ended``): its exit and the
    output before it were sent on the stream by then, and the answer carries the exit too. The
    stream is read to its exit, at most :data:`ABORT_STOP_ANSWER_WAIT_S` from the ``Stop`` sent;
    the answer's exit stands in when the stream's has not come by then. No timed wait races the
    command's own end. An answer without the end (an executor built before ``ended``, no command
    running by that id) leaves :data:`ABORT_OUTPUT_WAIT_S` from the answer, and an executor that
    cannot stop the command (built before ``Stop``, unreachable) the same from the ``Stop`` sent,
    for the output on its way, as before. Call it shielded (an abort's cancellation is under way):
    it bounds itself, and ``stop_now`` (the daemon's second stop signal) ends the wait at once,
    as it ends the daemon's other waits of a stop."""
    sent = trio.current_time()
    got: list[Any] = []
    answered: list[Any] = []
    with (stop_now or StopNow()).grace(ABORT_STOP_ANSWER_WAIT_S) as waiting:
        async with trio.open_nursery() as nursery:
            async def ask() -> None:
                try:
                    reply = await stop_answer(client, run_id, ABORT_STOP_ANSWER_WAIT_S)
                except EXECUTOR_FAILURES:
                    waiting.deadline = min(waiting.deadline, sent + ABORT_OUTPUT_WAIT_S)
                    return
                if reply.ended and reply.HasField("exit"):
                    answered.append(reply.exit)  # (the stream's exit, sent before: read on to it)
                else:  # (no end in the answer: the output on its way is read for a moment, as before)
                    waiting.deadline = min(waiting.deadline, trio.current_time() + ABORT_OUTPUT_WAIT_S)

            nursery.start_soon(ask)
            got.append(await drain_rest(events, join))
            nursery.cancel_scope.cancel()
    if got and got[0] is not None:
        return got[0], True
    return (answered[0] if answered else None), False


# The codes a command stream fails with that say nothing of the command, which may still run:
# its deadline passed, the connection was lost, the stream failed otherwise. Any other code is a
# refusal before anything ran (TOO_MANY_COMMANDS, CWD_MOVED, RUN_ID_IN_USE, a bad argument).
STREAM_LOST_CODES = frozenset({"EXECUTOR_TIMEOUT", "EXECUTOR_UNAVAILABLE", "EXECUTOR_ERROR"})


def command_text(out: bytes, ctx: ToolContext, cap: int, *, truncated: bool,
                 cut_end: bool | None = None) -> tuple[str, bool]:
    """A command's joined output as the text its result holds, and whether it was truncated.
    ``truncated``: the executor cut it at its cap. ``cut_end`` (default ``truncated``): the output
    ends where it was cut (the cap, or an abort), which ``Secrets.mend`` needs. The text is capped
    to ``cap`` bytes (0: the executor's default) too: invalid bytes became U+FFFD, 3 bytes each."""
    limit = cap or DEFAULT_COMMAND_OUTPUT
    # The executor cut the output at its cap knowing no key: a key across the cut left its
    # first characters at the end, which are left out; the rest is scrubbed before the cap below.
    text = ctx.secrets.mend(out.decode("utf-8", errors="replace"), cut_end=truncated if cut_end is None else cut_end)
    if len(text) > limit // 4:  # (no text of at most limit/4 characters can pass limit bytes)
        encoded = text.encode()
        if len(encoded) > limit:
            text, truncated = encoded[:limit].decode("utf-8", errors="ignore"), True
    return text, truncated


def command_cwd(args: dict[str, Any], command: str) -> str:
    """The ``cwd`` a command runs in (``run_command``, a job's start): workspace-relative text,
    the workspace when absent. Neither it nor ``command`` may hold NUL (no process takes one).
    An empty one is refused, as the file tools refuse an empty ``path``: the root is ``"."``."""
    cwd = args.get("cwd")
    if cwd is None:
        cwd = ""  # (absent or null: the executor's "" is the workspace root)
    elif not isinstance(cwd, str):
        raise ToolError("INVALID_ARGUMENT", "cwd must be a workspace-relative path")
    elif not cwd:
        raise ToolError("INVALID_ARGUMENT", 'cwd is empty (leave it out, or give ".", for the workspace root)')
    if "\0" in command or "\0" in cwd:
        raise ToolError("INVALID_ARGUMENT", "command and cwd cannot hold NUL characters")
    return cwd


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _recordable(path: str) -> bool:
    """Whether the log can hold ``path`` (its text is UTF-8; a file name read from the disk
    need not be, and comes with lone surrogates then)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _restored(edit: t.FileEdited) -> str:
    """The path ``revert_call`` restores an edit through: the file the edit wrote. The path as
    given may lead elsewhere by now (a link retargeted since); it is used only when the log does
    not say which file was written (written before that was kept, or the executor could not tell)."""
    return edit.written_path or edit.path


def restore_call_id(session_id: str, call_id: str, n: int) -> str:
    """The executor's call id of the ``n``-th restore of ``revert_call`` call ``call_id``:
    ``<session>:<call>/<n>``. The executor journals, replays and refuses a stopped id by call id,
    and every other call of the session is ``<session>:<call>`` with a recorded call id, which
    keeps to the id rule (``recordable_call_id``): no ``/``. So no call's id, whatever a model
    names it, is a restore's (``session:c1:0``, the form before, was also an edit ``c1:0``'s)."""
    return f"{session_id}:{call_id}/{n}"


def reverted_event(call_id: str, target: str, restored: list[str], edits: Sequence[t.FileEdited]) -> t.FileReverted:
    """The ``file.reverted`` of ``revert_call`` ``call_id`` of call ``target`` whose edits were
    ``edits``, that restored ``restored`` (one path per restore, in order: the last edits, last
    first): ``partial`` when it stopped before the last, and the state keeps the call's other
    edits, which ``revert_call`` of the call again restores."""
    return t.FileReverted(call_id=call_id, reverted_call_id=target, paths=list(restored),
                          partial=len(restored) < len(edits))


async def check_where_it_leads(ctx: ToolContext, client: Any, tool: str, arg: str, path: str,
                               allowlists: Sequence[tuple[str, Sequence[str] | None]] | None = None) -> str:
    """Raise ``PATH_NOT_ALLOWED`` when ``path`` leads (through symlinks in the workspace) outside
    the call's workspace allowlist. The execution plane has checked the path's text already; the
    executor says where it leads now, so the caller holds the execution-domain lock across this
    check and the call (no command of this session changes a link in between). ``allowlists``:
    (whose, prefixes) pairs to judge by instead, each of which must hold the path. Returns where
    the path was judged to lead ("" when no allowlist applies): a command passes it with its
    ``cwd`` (``cwd_leads_to``), so that a link changed in between by anything else (a background
    job, another process) cannot start it in a directory that was not judged."""
    judged = [(p, whose) for whose, p in (allowlists if allowlists is not None else [(tool, ctx.workspace_allowlist)])
              if p is not None]
    if not judged:
        return ""
    with executor_failures("EXECUTOR_ERROR"):
        real = await _resolved(client, path)
    for prefixes, whose in judged:
        if not isinstance(real, str) or not within_allowlist(real, prefixes):
            shown = path or "."
            of = "" if whose == tool else f" of {whose}"
            raise ToolError("PATH_NOT_ALLOWED", f"{tool}: {arg} {shown[:200]!r} leads to {ctx.secrets.cut(str(real), 200)!r}, outside "
                                                f"the workspace allowlist{of} ({', '.join(prefixes) or 'empty'})")
    assert isinstance(real, str)
    return real


async def where_it_leads(client: Any, path: str) -> str | None:
    """The canonical workspace-relative path ``path`` leads to now (see the executor's
    ``resolve``), or None when the executor cannot tell. (An edit's result says which file it
    wrote; this asks for an executor built before it did.)"""
    try:
        real = await _resolved(client, path)
    except EXECUTOR_FAILURES:
        return None
    return real if isinstance(real, str) else None


async def _resolved(client: Any, path: str) -> Any:
    """The executor's ``resolve`` answer for ``path`` (the root for ""), as it came."""
    out = await client.call("resolve", {"path": path or "."})
    return out.result.get("path")


def workspace_tools(pool: Respawning, artifacts: ArtifactStore) -> list[ToolSpec]:
    async def executor(ctx: ToolContext) -> Any:
        if ctx.project_id is None:
            raise ToolError("NO_WORKSPACE", "this session belongs to no project, so it has no workspace")
        with executor_failures("EXECUTOR_UNAVAILABLE"):  # (typed executor errors keep their codes)
            return await pool.get(ctx.project_id)

    @asynccontextmanager
    async def locked(ctx: ToolContext, *, write: bool) -> AsyncIterator[Any]:
        """The project's executor under its execution-domain lock (``write``: alone). Asked for
        again once the lock is held: the child may have been replaced while this call waited
        (it died under the call holding the lock, which ran again on the next one); a respawned
        child keeps its domain's lock, and the old one's client is closed."""
        ex = await executor(ctx)
        async with ex.lock.write() if write else ex.lock.read():
            now = await executor(ctx)
            yield now if now.lock is ex.lock else ex

    async def call(ctx: ToolContext, tool: str, args: dict[str, Any], *, write: bool) -> Reached[Any]:
        async with locked(ctx, write=write) as ex:
            return await call_locked(ex, ctx, tool, args)

    async def call_locked(ex: Any, ctx: ToolContext, tool: str, args: dict[str, Any]) -> Reached[Any]:
        """Run a replay-safe call (every tool that comes here is one) under ``ex``'s domain lock;
        a local child that died before it answered has it run once more on the child spawned in
        its place (:func:`once_more_if_died`), with the same call id, so the executor's call
        journal never applies an edit twice. Either run, when the second or the session's own
        re-run (``ctx.rerun``), is sent as run again on purpose: a ``Stop`` that gave up an
        earlier run does not refuse it."""
        return await once_more_if_died(pool, ex, lambda e: attempt(e, ctx, tool, args, rerun=ctx.rerun or e is not ex),
                                       f"call {ctx.session_id}:{ctx.call_id} ({tool})")

    async def attempt(ex: Any, ctx: ToolContext, tool: str, args: dict[str, Any], *, rerun: bool) -> Any:
        if isinstance(args.get("path"), str):
            await check_where_it_leads(ctx, ex.client, tool, "path", args["path"])
        with executor_failures("EXECUTOR_ERROR"):
            call_id = f"{ctx.session_id}:{ctx.call_id}"
            if tool not in EDITING_CALLS:
                return await ex.client.call(tool, args, call_id=call_id)
            return await writing(ex, tool, args, call_id, rerun=rerun,
                                 completed=lambda out: edited_while_cancelled(ctx, tool, args, out))

    async def writing(ex: Any, tool: str, args: dict[str, Any], call_id: str, *, rerun: bool = False,
                      completed: Callable[[Any], Awaitable[None]] | None = None) -> Any:
        """An editing call, run under the domain's write lock, which its caller holds until the
        call has ended on the executor: a caller cancelled (an abort) or past the call's deadline
        waits, shielded and bounded, for the executor to say so (``pool.call_ended``), so that
        the domain's next write never runs beside one still writing. ``rerun``: see
        ``ExecutorClient.call``.

        A call that completed all the same (it wrote before the executor's answer) is not lost:
        past its deadline, its outcome is returned, as if it had answered in time; cancelled, it
        is handed to ``completed`` (shielded) before the cancellation goes on."""
        try:
            return await ex.client.call(tool, args, call_id=call_id, rerun=rerun)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                done = completed_outcome(tool, call_id, await pool.call_ended(ex, call_id))
                if done is not None and completed is not None:
                    await completed(done)
            raise  # (whatever the answer held: the cancellation goes on)
        except EXECUTOR_FAILURES as exc:
            if getattr(exc, "code", None) == "EXECUTOR_TIMEOUT":  # (past its deadline: the same)
                with trio.CancelScope(shield=True):
                    done = completed_outcome(tool, call_id, await pool.call_ended(ex, call_id))
                if done is not None:
                    return done
            raise

    def completed_outcome(tool: str, call_id: str, reply: Any) -> Any:
        """The outcome of the ``Stop`` answer's completed call ``reply`` (None: none); None too,
        logged, when the answer cannot be read as one (not ``ok``, its result not a JSON object): what
        the caller was doing, a cancellation or a deadline's error, goes on as it would have."""
        if reply is None:
            return None
        try:
            return tool_outcome(tool, reply)
        except (ExecutorToolError, ValueError) as exc:
            log.warning("call %s (%s) completed while its caller had gone, but the executor's answer about it "
                        "cannot be read (%s): what it changed is not recorded", call_id, tool,
                        getattr(exc, "message", None) or exc)
            return None

    async def edited_while_cancelled(ctx: ToolContext, tool: str, args: dict[str, Any], out: Any) -> None:
        """An edit that completed while its caller was being cancelled (an abort, a program's
        time limit): its ``file.edited`` (with the copies revert_call restores from) goes to
        ``ctx.cut_events``, recorded with whatever records the call's ``tool.finished`` (the
        abort, the program's result), after it. When the copies cannot be stored (no
        ``file.edited`` without them) its path alone goes, for the result to say the file
        changed and cannot be undone; nothing for a ``restore`` (revert_call hands its
        ``file.reverted`` of what it restored itself)."""
        r = out.result
        if tool not in EDITING_TOOLS or ctx.cut_events is None or not r.get("changed"):
            return
        path = r.get("path", args.get("path", ""))
        # (the executor says which file it wrote; one that does not is not asked now: revert_call
        # restores through the path as given then)
        written = out.written_path if out.written_path is not None and _recordable(out.written_path) else None
        try:
            events = await edit_events(ctx, tool, path, written, out.before, out.after)
        except ToolError as exc:
            log.warning("call %s:%s (%s) was cancelled after it changed %s, which is not recorded: %s",
                        ctx.session_id, ctx.call_id, tool, path, exc.message)
            ctx.cut_events([], [path])
            return
        # (held until an event names them: the call's lease may end before the abort records them;
        # the session lets them go if it records none)
        artifacts.keep([e.artifact_id for e in events if isinstance(e, t.ArtifactStored)])
        ctx.cut_events(events, [])

    async def store(data: bytes) -> str:
        """``data`` put in the artifact store, off the event loop (it writes and fsyncs a file).
        Raises ``OSError`` (a full disk); nothing is left half-written (see ArtifactStore.put)."""
        return await trio.to_thread.run_sync(artifacts.put, data)

    async def edit_events(ctx: ToolContext, tool: str, path: str, written: str | None, before: bytes | None,
                          after: bytes | None) -> list[t._Event]:
        kept = [data for data in (before, after) if data is not None]
        try:
            # Both or neither (off the event loop: the files are written and fsynced): a "before"
            # left behind by a failed "after" would be a file no event names.
            stored = iter(await trio.to_thread.run_sync(artifacts.put_together, kept))
        except OSError as exc:
            # The file is written already: the call says so, and that it cannot be undone
            # (no file.edited without the bytes revert_call restores: a missing "before"
            # would read as "the file did not exist", and a revert would delete it).
            raise ToolError("ARTIFACT_WRITE_FAILED", f"{path} was changed, but the copies revert_call restores "
                                                     f"from could not be stored ({why_not_written(exc)}); "
                                                     f"revert_call cannot undo this call") from None
        ids = [next(stored) if data is not None else None for data in (before, after)]
        events: list[t._Event] = []
        for aid, data in zip(ids, (before, after)):
            if aid is not None and data is not None:
                events.append(t.ArtifactStored(artifact_id=aid, sha256=aid, mime="application/octet-stream",
                                               size=len(data), source="file-history"))
        events.append(t.FileEdited(call_id=ctx.call_id, path=path, before_artifact_id=ids[0],
                                   after_artifact_id=ids[1], before_sha256=_sha(before), after_sha256=_sha(after),
                                   tool=tool, written_path=written))
        return events

    async def read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        reached = await call(ctx, "read_file", args, write=False)
        r = reached.out.result
        if r.get("kind") != "directory" and r.get("eof") is False and ctx.secrets and "content" in r:
            # A page that ends inside a key holds its start back for the next page, as the
            # workspace route's pages do: the executor cut it knowing no key.
            r = dict(r)
            r["content"], r["next_offset"], _ = ctx.secrets.scrub_page(r["content"], r["next_offset"], False)
        if r.get("kind") == "directory":
            body = "\n".join(r.get("entries", []))
        else:
            body = r.get("content", "")
        if r.get("eof") is False:
            # The model sees the text, not the structured result: without this line a page cut by
            # max_lines or the page caps read as the whole file.
            first, count = r.get("start_line", 1), r.get("lines_returned", 0)
            unit = "entries" if r.get("kind") == "directory" else "lines"
            body += ("" if not body or body.endswith("\n") else "\n") + (
                f"[partial: {unit} {first}-{first + count - 1}, bytes {r.get('offset')}-{r.get('next_offset')} of "
                f"{r.get('size')}; to continue, call read_file with offset {r.get('next_offset')}]")
        elif not body and r.get("size", 0) > 0:
            # An empty page of a non-empty file: start_line or offset is at or past its end
            # (otherwise the model gets "(no output)", as for an empty file).
            unit = "entry" if r.get("kind") == "directory" else "line"
            body = (f"[nothing from {unit} {r.get('start_line')} (byte {r.get('offset')}) on: "
                    f"the end is at byte {r.get('size')}]")
        return ToolResult.text(body, r, rerun_after=reached.rerun_after)

    async def editing(tool: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        out = None
        try:
            async with locked(ctx, write=True) as ex:
                reached = await call_locked(ex, ctx, tool, args)
                ex, out = reached.ex, reached.out
                r = out.result
                path = r.get("path", args.get("path", ""))
                written = None
                if r.get("changed"):
                    # Which file was written (the path as given may name it through symlinks): "changes
                    # this session" lists it by that, and revert_call restores it. The executor says
                    # so with its result; one that does not is asked before another write may move a link.
                    written = (out.written_path if out.written_path is not None
                               else await where_it_leads(ex.client, path))
                    if written is not None and not _recordable(written):
                        written = None  # (a name that is not UTF-8: the log's text cannot hold it)
            events = await edit_events(ctx, tool, path, written, out.before, out.after) if r.get("changed") else []
        except trio.Cancelled:
            # Cancelled once the executor's reply was in (asking resolve, letting the lock go,
            # storing the copies): the edit is done, and is recorded as one completed while its
            # caller was being cancelled is (the call itself records it otherwise).
            if out is not None:
                with trio.CancelScope(shield=True):
                    await edited_while_cancelled(ctx, tool, args, out)
            raise
        summary = (f"{r.get('path')}: {'changed' if r.get('changed') else 'unchanged'}, "
                   f"{r.get('units_applied')} unit(s) applied, {r.get('bytes_written')} bytes written")
        return ToolResult.text(summary, r, events=events, rerun_after=reached.rerun_after)

    async def edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await editing("edit_file", args, ctx)

    async def patch_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await editing("patch_file", args, ctx)

    async def view_image(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        reached = await call(ctx, "view_image", args, write=False)
        out = reached.out
        try:
            aid = await store(out.data)
        except OSError as exc:
            raise ToolError("ARTIFACT_WRITE_FAILED", f"the image {args.get('path')} could not be stored "
                                                     f"({why_not_written(exc)})") from None
        structured = {"path": args.get("path"), "artifact_id": aid, "mime": out.mime, "size": len(out.data),
                      "sha256": aid}
        return ToolResult([t.TextPart(f"image {args.get('path')} ({out.mime}, {len(out.data)} bytes)"),
                           t.ImagePart(aid, out.mime)], structured,
                          events=[t.ArtifactStored(artifact_id=aid, sha256=aid, mime=out.mime, size=len(out.data),
                                                   source="view_image")], rerun_after=reached.rerun_after)

    async def revert_call(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        target = args.get("call_id")
        usage = "it takes {\"call_id\": \"...\"}"
        if set(args) - {"call_id"}:
            unknown = shortened_names(set(args) - {"call_id"})
            raise ToolError("INVALID_ARGUMENT", f"revert_call does not take {unknown}; {usage}")
        if not isinstance(target, str) or not target:
            raise ToolError("INVALID_ARGUMENT", "call_id must be a non-empty string, the id of an earlier edit_file "
                                                f"or patch_file call; {usage}")
        shown = shortened(repr(target))  # (a provider's call id: no rule to check it by, so only cut)
        if ctx.call_running is not None and ctx.call_running(target):
            # (its edits are not all made: a revert now would undo some, and the call would go on
            # editing after it, or find its files changed under it)
            raise ToolError("CALL_STILL_RUNNING", f"call {shown} is still running; revert it once it has finished")
        edits = ctx.file_edits(target) if ctx.file_edits is not None else []
        if not edits:
            raise ToolError("NOTHING_TO_REVERT", f"call {shown} changed no file in this session (or was reverted)")
        restored: list[str] = []  # (one per restore done, in order: the last edits, last first)

        def reverted() -> t.FileReverted:
            return reverted_event(ctx.call_id, target, restored, edits)

        def refused(e: t.FileEdited, where: str, code: str, message: str) -> ToolError:
            # (a restore that could not be done, whatever stopped it: its file, and what was restored before it)
            if message.startswith(f"{where}:"):  # (the executor's own messages name it)
                message = message[len(where) + 1:].lstrip()
            shown = where if where == e.path else f"{where} (edited as {e.path})"
            return ToolError(code, f"{shown}: {message} (reverted so far: {', '.join(restored) or 'none'})")

        try:
            async with locked(ctx, write=True) as ex:
                # The edits were judged when they were made; a path may lead elsewhere now (a link
                # put in its place since). All are judged before any is restored: by revert_call's
                # allowlist and by that of the tool that made the edit (a revert writes the file the
                # edit did; both editing tools' when the log does not say which).
                for e in reversed(edits):
                    makers = [e.tool] if e.tool else list(EDITING_TOOLS)
                    others = [(m, ctx.allowlist_of(m)) for m in makers] if ctx.allowlist_of is not None else []
                    await check_where_it_leads(ctx, ex.client, "revert_call", "path", _restored(e),
                                               [("revert_call", ctx.workspace_allowlist), *others])
                for e in reversed(edits):
                    where = _restored(e)
                    try:  # (off the event loop: a read of up to 8 MiB and its SHA-256)
                        before = (await trio.to_thread.run_sync(artifacts.get, e.before_artifact_id)
                                  if e.before_artifact_id else None)
                    except ArtifactError as exc:
                        raise refused(e, where, exc.code, exc.message) from None

                    async def restored_all_the_same(out: Any, where: str = where) -> None:
                        restored.append(where)  # (completed while the call was cut off: the Stop's answer says so)

                    try:
                        await writing(ex, "restore", {
                            "path": where, "content_hex": before.hex() if before is not None else None,
                            "expect_sha256": e.after_sha256},
                            restore_call_id(ctx.session_id, ctx.call_id, len(restored)), completed=restored_all_the_same)
                    except EXECUTOR_FAILURES as exc:
                        raise refused(e, where, getattr(exc, "code", "EXECUTOR_ERROR"),
                                      str(getattr(exc, "message", exc))) from None
                    restored.append(where)
        except trio.Cancelled:
            # Cut off (an abort, a program's time limit) with files restored: recorded with whatever
            # records the call's tool.finished, as a cut-off edit's file.edited is.
            if restored and ctx.cut_events is not None:
                ctx.cut_events([reverted()], [])
            raise
        except ToolError as exc:
            if not restored:
                raise
            # (the refusal is the call's result, as it was; the files restored before it are recorded with it)
            return dataclasses.replace(ToolResult.error(exc.code, exc.message), events=[reverted()])
        return ToolResult.text(f"reverted call {target}: restored {', '.join(restored)}",
                               {"call_id": target, "paths": restored}, events=[reverted()])

    async def restores_completed(arguments: str, ctx: ToolContext) -> list[t._Event]:
        """``revert_call``'s :data:`tools.base.CompletedFn`: the ``file.reverted`` of the restores
        that a call cut off before the session's restart completed on the executor (none: no event).

        The restores ran one after another, the n-th (:func:`restore_call_id`) sent only once the
        one before it had completed, so they are asked in order, each by a ``Stop`` with its id
        (the answer carries a completed call's reply, from the executor's call journal), until one
        that did not complete: none after it was sent. The ``Stop`` leaves each id remembered,
        refusing a later send under it: right for a call that never runs again. All the asks are
        bounded together (``ABORT_STOP_ANSWER_WAIT_S``); past it, or when the executor cannot be
        reached, or a restore asked has not ended, a warning names the call, and the restores
        confirmed before are recorded alone (an answer that cannot be read is logged by
        :func:`completed_outcome`, and ends the asks the same way)."""
        try:
            args = json.loads(arguments)
        except ValueError:
            return []
        target = args.get("call_id") if isinstance(args, dict) else None
        edits = ctx.file_edits(target) if isinstance(target, str) and target and ctx.file_edits is not None else []
        if not edits or ctx.project_id is None:
            return []  # (nothing to revert: the call restored nothing)
        restored: list[str] = []
        why: str | None = None
        try:
            try:  # (outside the asks' bound, under the pool's own: a local executor starts cold at a restart)
                ex = await pool.get(ctx.project_id)
            except EXECUTOR_FAILURES as exc:
                ex = None
                why = (f"{'could not be reached' if pool.remote is not None else 'was not started'} "
                       f"({getattr(exc, 'code', type(exc).__name__)}: {getattr(exc, 'message', None) or exc})")
            if ex is not None:
                with trio.move_on_after(ABORT_STOP_ANSWER_WAIT_S) as asking:
                    try:
                        for n, e in enumerate(reversed(edits)):
                            call_id = restore_call_id(ctx.session_id, ctx.call_id, n)
                            reply = await stop_answer(ex.client, call_id,
                                                      max(asking.deadline - trio.current_time(), 0.01))
                            if reply.found and not reply.ended:
                                why = f"had not ended its restore {call_id} when asked"
                                break
                            if not reply.HasField("call") or completed_outcome("restore", call_id, reply.call) is None:
                                break
                            restored.append(_restored(e))
                    except EXECUTOR_FAILURES as exc:
                        why = (f"could not be asked about them ({getattr(exc, 'code', type(exc).__name__)}: "
                               f"{getattr(exc, 'message', None) or exc})")
                if asking.cancelled_caught:
                    why = f"did not answer about them within {ABORT_STOP_ANSWER_WAIT_S:g} s"
        except trio.Cancelled:
            # Cut off while asking (an abort, the session's deletion): the restores confirmed by
            # then are recorded with whatever records the call's tool.finished, as revert_call's are.
            if restored and ctx.cut_events is not None:
                ctx.cut_events([reverted_event(ctx.call_id, target, restored, edits)], [])
            raise
        if why is not None:
            log.warning("call %s:%s (revert_call), cut off before the session's restart, is recorded interrupted; "
                        "the restores it completed on the executor are recorded as far as confirmed (%d of %d), "
                        "as the executor of project %s %s", ctx.session_id, ctx.call_id, len(restored), len(edits),
                        ctx.project_id, why)
        return [reverted_event(ctx.call_id, target, restored, edits)] if restored else []

    async def run_command(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        usage = "run_command takes {command, timeout_ms?, max_output_bytes?, cwd?}"
        extra = set(args) - {"command", "timeout_ms", "max_output_bytes", "cwd"}
        command = args.get("command")
        if extra:
            raise ToolError("INVALID_ARGUMENT", f"run_command does not take "
                                                f"{shortened_names(extra)}; {usage}")
        if "command" not in args:
            raise ToolError("INVALID_ARGUMENT", f"run_command needs 'command'; {usage}")
        if not isinstance(command, str):
            raise ToolError("INVALID_ARGUMENT", f"command must be a string, got "
                                                f"{shortened_json(command)}; {usage}")
        if not command.strip():
            raise ToolError("INVALID_ARGUMENT", f"command is empty (or only white space); {usage}")
        if len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
            raise ToolError("COMMAND_TOO_LONG", f"command is longer than {MAX_COMMAND_BYTES} bytes")
        timeout = int_arg(args, "timeout_ms", 0, 0, MAX_COMMAND_TIMEOUT_MS)
        cap = int_arg(args, "max_output_bytes", 0, 0, MAX_COMMAND_OUTPUT)
        cwd = command_cwd(args, command)
        out = bytearray()
        join = StreamJoin(out.extend, whole_lines=True)  # (lines kept whole: tools.command_output)
        exit_info: Any = None
        run_id = secrets.token_hex(16)  # (what the abort's Stop names the command by)
        async with locked(ctx, write=True) as ex:
            judged = await check_where_it_leads(ctx, ex.client, "run_command", "cwd", cwd)
            with executor_failures("EXECUTOR_ERROR"):
                # A slot of the executor's command streams, all held by jobs and other sessions'
                # commands, is waited for no longer than the command's timeout (the wait holds the
                # domain's write lock): Core's count of them first, then the executor's own, which
                # frees a cancelled stream's slot a moment after Core does (its refusal comes
                # before anything runs, so the command is sent again while time is left).
                async def attempt(slot_wait_s: float) -> Any:
                    # (sent: the Run went out, the block entered; over: the command's end is
                    # known, or was waited for)
                    sent = over = False
                    try:
                        async with ex.client.run(command, timeout_ms=timeout, max_output_bytes=cap,
                                                 cwd=cwd, cwd_leads_to=judged, run_id=run_id,
                                                 slot_wait_s=slot_wait_s) as events:
                            sent = True
                            try:
                                got = await drain(events, join)
                            except trio.Cancelled:
                                # (an abort: what the command printed is kept with it)
                                if ctx.cut_output is not None:
                                    await cut_at_abort(events)  # (stopped and waited for, bounded)
                                    over = True
                                raise
                            over = got is not None  # (the exit is sent once the group has ended)
                            return got
                    except EXECUTOR_FAILURES as exc:
                        # (a refusal, or a Run grpc found no connection for: nothing of it runs, and
                        # a Stop would warn of a command that never reached the executor)
                        over = (over or getattr(exc, "code", None) not in STREAM_LOST_CODES
                                or getattr(exc, "unsent", False))
                        raise
                    finally:
                        if sent and not over:
                            # The stream was left before the command's exit (its deadline passed,
                            # it failed or ended without the exit, its caller was cancelled with
                            # nothing to keep): the executor is ending the command, which may
                            # take its trap's time. The domain's write lock is held until the
                            # executor says the run is over, as for a given-up edit.
                            with trio.CancelScope(shield=True):
                                await pool.call_ended(ex, run_id,
                                                      f"the command of call {ctx.session_id}:{ctx.call_id}")

                async def cut_at_abort(events: Any) -> None:
                    # The executor is asked to stop the command and answers once the command has
                    # ended; the output still on its way (the executor's read, gRPC, the pump) is
                    # read up to the exit, which says how it ended, at most
                    # ABORT_STOP_ANSWER_WAIT_S in all, so the abort stays bounded; the stream is
                    # then cancelled, which ends the command's group on the executor if the stop
                    # did not.
                    assert ctx.cut_output is not None
                    ended, whole = None, False
                    with trio.CancelScope(shield=True):
                        ended, whole = await stop_and_drain(ex.client, run_id, events, join,
                                                            pool.stop_now)
                    join.flush()
                    # (no exit: no ``truncated`` from the executor; the output was cut at the cap
                    # when it reached it, as the executor sends no byte past it)
                    reached = (ended.truncated if ended is not None
                               else len(out) >= (cap or DEFAULT_COMMAND_OUTPUT))
                    # An exit from the Stop answer alone: the stream was not read to it, so what
                    # came last may be missing; the text says it was cut.
                    lost = ended is not None and not whole
                    text, cut = command_text(out, ctx, cap, truncated=reached or lost,
                                             cut_end=ended is None or reached or lost)
                    ctx.cut_output(text, cut, None if ended is None else CommandEnd(
                        ended.exit_code, signal_name(ended.exit_code), ended.stopped))

                def gave_up() -> ToolError:
                    # (whichever refused last, the client's count or the executor's own, the
                    # user is told the same: what held the slots, for how long the command
                    # waited, what to do)
                    return ToolError("TOO_MANY_COMMANDS", (
                        f"all {ex.client.stream_slots} command streams of this workspace's "
                        f"executor are in use (background jobs and other sessions' commands hold "
                        f"them while they run) and none came free within the command's timeout "
                        f"of {timeout or DEFAULT_TIMEOUT_MS} ms; stop a job, or wait for one to "
                        f"end, and run it again"))

                wait_s = (timeout or DEFAULT_TIMEOUT_MS) / 1000
                exit_info = await resend_while_slots_full(attempt, wait_s=wait_s,
                                                          until=trio.current_time() + wait_s,
                                                          untouched=lambda: not join.began,
                                                          gave_up=gave_up)
                join.flush()
        if exit_info is None:
            raise ToolError("COMMAND_LOST",
                            "the command's executor stream ended without an exit status")
        text, truncated = command_text(out, ctx, cap, truncated=exit_info.truncated)
        killed_by = signal_name(exit_info.exit_code)
        structured = {"exit_code": exit_info.exit_code, "signal": killed_by,
                      "timed_out": exit_info.timed_out, "truncated": truncated,
                      "duration_ms": exit_info.duration_ms}
        ended = (f"killed by signal {-exit_info.exit_code} ({killed_by})" if killed_by
                 else f"exit {exit_info.exit_code}")
        note = (f"\n[{ended}{', timed out' if exit_info.timed_out else ''}"
                f"{', output truncated' if truncated else ''}]")
        failed = exit_info.exit_code != 0 or exit_info.timed_out
        return ToolResult.text(text + note, structured, is_error=failed, error_code=(
            ("COMMAND_TIMED_OUT" if exit_info.timed_out else "COMMAND_FAILED") if failed else None))

    path_schema = {"type": "string", "description": "workspace-relative path"}
    return [
        ToolSpec("read_file", "Read a UTF-8 file or list a directory (hidden entries, sorted, dirs end with /). "
                 "start_line (1-based) and max_lines select lines; offset/next_offset are UTF-8 byte positions with eof.",
                 {"type": "object", "properties": {"path": path_schema, "start_line": {"type": "integer", "minimum": 1},
                  "max_lines": {"type": "integer", "minimum": 1}, "offset": {"type": "integer", "minimum": 0}},
                  "required": ["path"], "additionalProperties": False}, read_file, replay_safe=True),
        ToolSpec("edit_file", "Create (content; must not exist), rewrite (content; existing file) or edit (edits: "
                 "[{old_string, new_string, replace_all?}], unique exact matches, applied in order) one file. "
                 "rewrite keeps the file's UTF-8 BOM, and its CRLF endings unless content has a CRLF of its own.",
                 {"type": "object", "properties": {"path": path_schema, "mode": {"enum": ["create", "rewrite", "edit"]},
                  "content": {"type": "string"}, "edits": {"type": "array", "maxItems": 128, "items": {
                      "type": "object", "properties": {"old_string": {"type": "string"}, "new_string": {"type": "string"},
                                                       "replace_all": {"type": "boolean"}},
                      "required": ["old_string", "new_string"]}}},
                  "required": ["path", "mode"], "additionalProperties": False}, edit_file, replay_safe=True, read_only=False),
        # (no "new" or "create" in its words: capability_search would rank it beside edit_file for
        # "create a new file", a call it refuses)
        ToolSpec("patch_file", "Apply update hunks to one file that exists, the one path names (no '*** Begin "
                 "Patch' envelope, no '---'/'+++' headers): '@@' or '@@ <exact anchor line>' headers (the hunk "
                 "matches after that line), body lines prefixed ' ', '+' or '-'; '*** End of File' pins a hunk "
                 "to the end. For a file not there yet, see edit_file.",
                 {"type": "object", "properties": {"path": path_schema, "patch": {"type": "string"}},
                  "required": ["path", "patch"], "additionalProperties": False}, patch_file, replay_safe=True, read_only=False),
        ToolSpec("view_image", "Look at a PNG, JPEG, GIF or WebP image of the workspace "
                               "(at most 5 MiB and 8000 pixels a side).",
                 {"type": "object", "properties": {"path": path_schema}, "required": ["path"], "additionalProperties": False},
                 view_image, replay_safe=True),
        ToolSpec("revert_call", "Restore the files an earlier edit_file/patch_file call of this session changed "
                 "to their exact prior bytes (refused if they changed since).",
                 {"type": "object", "properties": {"call_id": {"type": "string"}}, "required": ["call_id"],
                  "additionalProperties": False}, revert_call, read_only=False,
                 completed_when_interrupted=restores_completed),
        ToolSpec("run_command", "Run a shell command in the workspace (timeout_ms: 0 or left out is the default, "
                 "120000; output capped, cancellable).",
                 {"type": "object", "properties": {"command": {"type": "string"},
                  "timeout_ms": {"type": "integer", "minimum": 0, "maximum": MAX_COMMAND_TIMEOUT_MS},
                  "max_output_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_COMMAND_OUTPUT},
                  "cwd": {"type": "string"}}, "required": ["command"], "additionalProperties": False},
                 run_command, read_only=False),
    ]
