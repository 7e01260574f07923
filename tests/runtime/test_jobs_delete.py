"""A session delete stops every background job, also one the agent starts while the delete is
stopping the others (the job's command is a stand-in for the executor's, given through the
``JobRun`` seam of runtime.jobs; the actor, the log and the tool path are the real ones)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import trio

from events import types as t
from events.reader import StoredEvent
from runtime.actor import Delete
from runtime.errors import LensError
from runtime.jobs import JobRun
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.base import ToolResult, ToolSpec

from conftest import by_kind


async def forever(sink: Callable[[bytes], None]) -> Any:
    await trio.sleep_forever()


def slow_to_stop(stopping: trio.Event, done: trio.Event) -> JobRun:
    """A job's command that runs until it is stopped, and whose stop takes until ``done`` is
    set: ``stopping`` is set once the stop has begun."""

    async def run(sink: Callable[[bytes], None]) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                stopping.set()
                await done.wait()

    return run


@asynccontextmanager
async def calling(runtime_factory: Any, tools: dict[str, Callable[..., Awaitable[ToolResult]]]
                  ) -> AsyncIterator[tuple[Any, str]]:
    """A runtime whose faux model calls each of ``tools`` (name: handler), in that order, in one
    turn of a new session, submitted: (the runtime, the session's id)."""
    schema = {"type": "object", "properties": {}}
    specs = [ToolSpec(name, "", schema, handler, read_only=False) for name, handler in tools.items()]
    script = [FauxTurn(when="go", tool_calls=[FauxToolCall(name, {}) for name in tools])]
    async with runtime_factory(script=script, extra_tools=specs) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "go")
        yield rt, sid


def job_reports(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The reports of jobs' ends to the agent (inputs of a ``job:`` request)."""
    return [e for e in by_kind(events, "input.submitted") if (e.request_id or "").startswith("job:")]


async def test_a_job_started_while_a_delete_stops_the_others_is_stopped_too(runtime_factory):
    # stopping the first job takes a moment: meanwhile the agent starts another job
    go, second_started = trio.Event(), trio.Event()

    async def first(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult.text("started", await ctx.jobs.start("first", slow_to_stop(go, second_started),
                                                               call_id=ctx.call_id))

    async def second(args: dict[str, Any], ctx: Any) -> ToolResult:
        await go.wait()
        try:  # (as the job tool does: a refusal is the call's error)
            out = await ctx.jobs.start("second", forever, call_id=ctx.call_id)
        except LensError as exc:
            return ToolResult.error(exc.code, exc.message)
        finally:
            second_started.set()
        return ToolResult.text("started", out)

    async with calling(runtime_factory, {"first_job": first, "second_job": second}) as (rt, sid):
        await rt.until(sid, lambda s: len(s.jobs) == 1 and s.agents["main"].running_call is not None)
        with trio.fail_after(30):
            await rt.call(sid, Delete())
        state = await rt.state(sid)
        assert state.deleted
        assert {j.command: (j.status, j.reason) for j in state.jobs.values() if j.command == "first"} == {
            "first": ("stopped", "session deleted")}
        # nothing runs on in a deleted session (a stop over HTTP would be SESSION_DELETED)
        assert [j.command for j in state.jobs.values() if j.status == "running"] == []
        assert not job_reports(await rt.events(sid))


async def test_a_stop_whose_reason_reads_session_deleted_is_still_reported(runtime_factory):
    # Only the delete's own stop leaves the report out: a stop that is no delete is reported,
    # whatever its reason says.
    from runtime import decide as d

    async def start_and_stop(args: dict[str, Any], ctx: Any) -> ToolResult:
        out = await ctx.jobs.start("sleeper", forever, call_id=ctx.call_id)
        return ToolResult.text("stopped", await ctx.jobs.stop(out["job_id"], d.SESSION_DELETED))

    async with calling(runtime_factory, {"start_and_stop": start_and_stop}) as (rt, sid):
        await rt.until(sid, lambda s: [(j.status, j.reason) for j in s.jobs.values()] == [
            ("stopped", d.SESSION_DELETED)])
        # (the end and its report are one append)
        assert len(job_reports(await rt.events(sid))) == 1


async def test_a_job_whose_stop_is_under_way_when_the_delete_begins_is_not_reported(runtime_factory):
    # The agent's ``job stop`` is still waiting for the job's end when the delete stops every
    # job: the end is one the delete records, so no report of it comes before session.deleted.
    stopping, release = trio.Event(), trio.Event()
    held: dict[str, Any] = {}

    async def start_and_stop(args: dict[str, Any], ctx: Any) -> ToolResult:
        held["jobs"] = ctx.jobs
        out = await ctx.jobs.start("slow", slow_to_stop(stopping, release), call_id=ctx.call_id)
        return ToolResult.text("stopped", await ctx.jobs.stop(out["job_id"]))

    async with calling(runtime_factory, {"start_and_stop": start_and_stop}) as (rt, sid):
        await stopping.wait()  # (the agent's stop is under way)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.call, sid, Delete())
                while held["jobs"]._closing is None:  # (the delete's stop of every job has begun)
                    await trio.sleep(0)
                release.set()
        state = await rt.state(sid)
        assert state.deleted
        assert [j.status for j in state.jobs.values()] == ["stopped"]
        events = await rt.events(sid)
        assert not job_reports(events)
        assert events[-1].kind == "session.deleted"
