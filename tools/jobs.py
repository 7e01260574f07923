"""The ``job`` tool (F-HAR-2): shell commands that run in the background.

``job({"action": "start", "command", "timeout_ms"?, "cwd"?})`` starts a command through the
project's executor (the same command RPC as ``run_command``) and returns its ``job_id`` at once;
``{"action": "list"}``, ``{"action": "read", "job_id", "offset"?, "max_bytes"?}`` (output so far,
from memory) and ``{"action": "stop", "job_id"}``. When a job ends, the session reports it to the
main agent as a new input. The session's jobs live in its actor (``ctx.jobs``, a
:class:`runtime.jobs.SessionJobs`); this module only validates and runs the command. Main agent
only: a job outlives the call that started it, and its report goes to the main agent.
"""

from __future__ import annotations

from typing import Any

from events.ids import id_rule, is_id
from events.secrets import Secrets
from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)

from .base import ToolContext, ToolError, ToolResult, ToolSpec
from .command_output import StreamJoin, drain
from .rerun import ExecutorAccess, executor_failures
from .executor.commands import DEFAULT_TIMEOUT_MS  # (the executor's default timeout_ms)
from .slot_resend import resend_while_slots_full
from .workspace_tools import (MAX_COMMAND_BYTES, MAX_COMMAND_OUTPUT, MAX_COMMAND_TIMEOUT_MS, check_where_it_leads,
                              command_cwd, int_arg)

DEFAULT_JOB_TIMEOUT_MS = MAX_COMMAND_TIMEOUT_MS  # a background job may run as long as any command
# How long a job's start refused by the executor for its command slots (TOO_MANY_COMMANDS) is
# sent again, from the first refusal: run_command's default wait, or the job's timeout if less.
JOB_SLOT_RESEND_MS = DEFAULT_TIMEOUT_MS
DEFAULT_READ_BYTES = 16 * 1024
MAX_READ_BYTES = 64 * 1024

_ARGS = {
    "start": ({"command"}, {"timeout_ms", "cwd"}),
    "list": (set(), set()),
    "read": ({"job_id"}, {"offset", "max_bytes"}),
    "stop": ({"job_id"}, set()),
}
_PROPERTIES = frozenset({"action"}.union(*(required | optional for required, optional in _ARGS.values())))
USAGE = ('job takes {"action": "start", "command", "timeout_ms"?, "cwd"?}, {"action": "list"}, '
         '{"action": "read", "job_id", "offset"?, "max_bytes"?} or {"action": "stop", "job_id"}')


def _line(job: dict[str, Any], secrets: Secrets) -> str:
    status = job["status"]
    if status == "exited":
        status = f"exited {job['exit_code']}"
    elif job.get("reason"):
        status = f"{status} ({job['reason']})"
    command = secrets.cut(job["command"], 120, "…")  # (a command stored before its key was known)
    return f"{job['job_id']} {status}: {command}"


def job_tool(pool: ExecutorAccess) -> ToolSpec:
    from runtime.errors import LensError  # (runtime imports tools; the errors module imports nothing)
    from runtime.executor_client import ExecutorToolError
    from runtime.jobs import JobExit

    async def start(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("INVALID_ARGUMENT", "command must be a non-empty string")
        if len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
            raise ToolError("COMMAND_TOO_LONG", f"command is longer than {MAX_COMMAND_BYTES} bytes")
        # (0 is the default, as run_command reads it: the two command tools take the same values)
        timeout = int_arg(args, "timeout_ms", 0, 0, MAX_COMMAND_TIMEOUT_MS) or DEFAULT_JOB_TIMEOUT_MS
        cwd = command_cwd(args, command)
        if ctx.project_id is None:
            raise ToolError("NO_WORKSPACE", "this session belongs to no project, so it has no workspace")
        with executor_failures("EXECUTOR_UNAVAILABLE"):  # (typed executor errors keep their codes)
            ex = await pool.get(ctx.project_id)
        # (no lock is held while a job runs, so a link may change later: checked as it starts)
        judged = await check_where_it_leads(ctx, ex.client, "job", "cwd", cwd)

        async def run(write: Any) -> JobExit | None:
            # No execution-domain lock: a job runs for minutes or hours, and holding the write
            # lock that long would stop every edit (run_command holds it for its whole run).
            join = StreamJoin(write)
            resend_ms = min(timeout, JOB_SLOT_RESEND_MS)

            async def attempt(_: float) -> Any:
                # (Core's own count of the streams is waited for with no bound, as a job's start
                # is: the job is listed running meanwhile and holds no lock)
                async with ex.client.run(command, timeout_ms=timeout, max_output_bytes=MAX_COMMAND_OUTPUT,
                                         cwd=cwd, cwd_leads_to=judged) as events:
                    return await drain(events, join)

            def gave_up() -> Exception:
                return ExecutorToolError("TOO_MANY_COMMANDS", (
                    f"all {ex.client.stream_slots} command streams of this workspace's executor are in use "
                    f"(background jobs and other sessions' commands hold them while they run) and none came "
                    f"free within {resend_ms} ms of the executor's first refusal; stop a job, or wait for one "
                    f"to end, and start it again"))

            try:
                # A refusal for the executor's command slots comes before anything runs: the
                # start is sent again, as run_command's is (one freed a moment ago may still be
                # counted by the executor, or another of its clients holds them).
                end = await resend_while_slots_full(attempt, wait_s=resend_ms / 1000, until=None,
                                                    untouched=lambda: not join.began, gave_up=gave_up)
                return None if end is None else JobExit(end.exit_code, end.timed_out, timeout, end.truncated)
            finally:
                join.flush()  # (also when stopped: what the command wrote is kept)

        out = await ctx.jobs.start(command, run, call_id=ctx.call_id, agent_id=ctx.agent_id, task_id=ctx.task_id)
        return ToolResult.text(f"started background job {out['job_id']}; when it ends you get a message saying so. "
                               f"Read its output with job read, stop it with job stop.", out)

    async def job(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        action = args.get("action")
        # (checked as a string first: a list or an object is no key to look up, and the lookup's
        # TypeError would end the call as a crash)
        if not isinstance(action, str) or action not in _ARGS:
            raise ToolError("INVALID_ARGUMENT", f"action must be one of {', '.join(_ARGS)}, got "
                                                f"{shortened_json(action)}; {USAGE}")
        # (an argument of the schema sent as null is that argument left out: a model that fills
        # every property of the schema sends null for those the action does not take; a name the
        # schema lacks is refused below, null or not, as run_command, todo and ask_user refuse it)
        args = {k: v for k, v in args.items() if v is not None or k not in _PROPERTIES}
        required, optional = _ARGS[action]
        given = set(args) - {"action"}
        if not required <= given:
            raise ToolError("INVALID_ARGUMENT", f"job {action} needs {', '.join(sorted(required - given))}; {USAGE}")
        if given - required - optional:
            unknown = shortened_names(given - required - optional)
            raise ToolError("INVALID_ARGUMENT", f"job {action} does not take {unknown}; {USAGE}")
        if ctx.jobs is None:
            raise ToolError("JOBS_UNAVAILABLE", "this session cannot run background jobs")
        if "job_id" in args and not is_id(args["job_id"]):  # (as the job routes check it)
            raise ToolError("INVALID_ARGUMENT", id_rule("job_id") + "; it is a job id from job start or job list")
        try:
            if action == "start":
                return await start(args, ctx)
            if action == "list":
                jobs = ctx.jobs.list()
                text = "\n".join(_line(j, ctx.secrets) for j in jobs) if jobs else "no jobs in this session"
                return ToolResult.text(text, {"jobs": jobs})
            if action == "read":
                offset = int_arg(args, "offset", 0, 0, 2**63 - 1)  # (the job route's bound)
                limit = int_arg(args, "max_bytes", DEFAULT_READ_BYTES, 1, MAX_READ_BYTES)
                r = await ctx.jobs.read(args["job_id"], offset, limit)
                note = (f"[{_line(r, ctx.secrets)}; output bytes {r['offset']}-{r['next_offset']}"
                        + (f" (bytes before {r['dropped_before']} are no longer kept)" if r["dropped_before"] else "")
                        + ("" if r["eof"] else f"; to continue, read with offset {r['next_offset']}")
                        + ("; only the recorded tail is left" if r["source"] == "tail" else "")
                        + ("; the output saved when Lens was stopped" if r["source"] == "saved" else "") + "]")
                body = r["output"]
                return ToolResult.text(body + ("" if not body or body.endswith("\n") else "\n") + note,
                                       {k: v for k, v in r.items() if k != "output"})
            r = await ctx.jobs.stop(args["job_id"], "stopped by the agent")
            return ToolResult.text(_line(r, ctx.secrets), r)
        except LensError as exc:
            raise ToolError(exc.code, exc.message) from None

    return ToolSpec(
        "job",
        "Background jobs: start a shell command in the workspace that runs on while you work "
        "(returns its job_id at once; when it ends you get a message with its status and last output), "
        "list jobs, read a job's output so far (offset: bytes already read), stop a job.",
        {"type": "object", "properties": {
            "action": {"type": "string", "enum": ["start", "list", "read", "stop"]},
            "command": {"type": "string", "description": "start: the shell command"},
            "timeout_ms": {"type": "integer", "minimum": 0, "maximum": MAX_COMMAND_TIMEOUT_MS,
                           "description": f"start: ended after this long (0 or left out: the default, "
                                          f"{DEFAULT_JOB_TIMEOUT_MS})"},
            "cwd": {"type": "string", "description": "start: workspace-relative directory"},
            "job_id": {"type": "string", "description": "read, stop: the job"},
            "offset": {"type": "integer", "minimum": 0, "description": "read: the output byte to start at"},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_READ_BYTES}},
         "required": ["action"], "additionalProperties": False},
        job, main_only=True, read_only=False)
