"""A session delete stops every background job, also one the agent starts while the delete is
stopping the others (the job's command is a stand-in for the executor's, given through the
``JobRun`` seam of runtime.jobs; the actor, the log and the tool path are the real ones)."""

from __future__ import annotations

from typing import Any, Callable

import trio

from events import types as t
from runtime.actor import Delete
from runtime.errors import LensError
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.base import ToolResult, ToolSpec

from conftest import by_kind


async def test_a_job_started_while_a_delete_stops_the_others_is_stopped_too(runtime_factory):
    go, second_started = trio.Event(), trio.Event()

    async def slow_to_stop(sink: Callable[[bytes], None]) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            # stopping this one takes a moment: meanwhile the agent starts another job
            with trio.CancelScope(shield=True):
                go.set()
                await second_started.wait()

    async def forever(sink: Callable[[bytes], None]) -> Any:
        await trio.sleep_forever()

    async def first(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult.text("started", await ctx.jobs.start("first", slow_to_stop, call_id=ctx.call_id))

    async def second(args: dict[str, Any], ctx: Any) -> ToolResult:
        await go.wait()
        try:  # (as the job tool does: a refusal is the call's error)
            out = await ctx.jobs.start("second", forever, call_id=ctx.call_id)
        except LensError as exc:
            return ToolResult.error(exc.code, exc.message)
        finally:
            second_started.set()
        return ToolResult.text("started", out)

    schema = {"type": "object", "properties": {}}
    tools = [ToolSpec("first_job", "", schema, first, read_only=False),
             ToolSpec("second_job", "", schema, second, read_only=False)]
    script = [FauxTurn(when="go", tool_calls=[FauxToolCall("first_job", {}), FauxToolCall("second_job", {})])]
    async with runtime_factory(script=script, extra_tools=tools) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "go")
        await rt.until(sid, lambda s: len(s.jobs) == 1 and s.agents["main"].running_call is not None)
        with trio.fail_after(30):
            await rt.call(sid, Delete())
        state = await rt.state(sid)
        assert state.deleted
        assert {j.command: (j.status, j.reason) for j in state.jobs.values() if j.command == "first"} == {
            "first": ("stopped", "session deleted")}
        # nothing runs on in a deleted session (a stop over HTTP would be SESSION_DELETED)
        assert [j.command for j in state.jobs.values() if j.status == "running"] == []
        events = await rt.events(sid)
        assert not [e for e in by_kind(events, "input.submitted") if (e.request_id or "").startswith("job:")]


async def test_a_stop_whose_reason_reads_session_deleted_is_still_reported(runtime_factory):
    # Only the delete's own stop leaves the report out: a stop that is no delete is reported,
    # whatever its reason says.
    from runtime import decide as d

    async def forever(sink: Callable[[bytes], None]) -> Any:
        await trio.sleep_forever()

    async def start_and_stop(args: dict[str, Any], ctx: Any) -> ToolResult:
        out = await ctx.jobs.start("sleeper", forever, call_id=ctx.call_id)
        return ToolResult.text("stopped", await ctx.jobs.stop(out["job_id"], d.SESSION_DELETED))

    schema = {"type": "object", "properties": {}}
    tools = [ToolSpec("start_and_stop", "", schema, start_and_stop, read_only=False)]
    script = [FauxTurn(when="go", tool_calls=[FauxToolCall("start_and_stop", {})])]
    async with runtime_factory(script=script, extra_tools=tools) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "go")
        await rt.until(sid, lambda s: [(j.status, j.reason) for j in s.jobs.values()] == [
            ("stopped", d.SESSION_DELETED)])
        # (the end and its report are one append)
        events = await rt.events(sid)
        reports = [e for e in by_kind(events, "input.submitted") if (e.request_id or "").startswith("job:")]
        assert len(reports) == 1


async def test_a_job_whose_stop_is_under_way_when_the_delete_begins_is_not_reported(runtime_factory):
    # The agent's ``job stop`` is still waiting for the job's end when the delete stops every
    # job: the end is one the delete records, so no report of it comes before session.deleted.
    stopping, release = trio.Event(), trio.Event()
    held: dict[str, Any] = {}

    async def slow_to_stop(sink: Callable[[bytes], None]) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                stopping.set()
                await release.wait()

    async def start_and_stop(args: dict[str, Any], ctx: Any) -> ToolResult:
        held["jobs"] = ctx.jobs
        out = await ctx.jobs.start("slow", slow_to_stop, call_id=ctx.call_id)
        return ToolResult.text("stopped", await ctx.jobs.stop(out["job_id"]))

    schema = {"type": "object", "properties": {}}
    tools = [ToolSpec("start_and_stop", "", schema, start_and_stop, read_only=False)]
    script = [FauxTurn(when="go", tool_calls=[FauxToolCall("start_and_stop", {})])]
    async with runtime_factory(script=script, extra_tools=tools) as rt:
        sid = await rt.session()
        await rt.submit(sid, "r1", "go")
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
        assert not [e for e in by_kind(events, "input.submitted") if (e.request_id or "").startswith("job:")]
        assert events[-1].kind == "session.deleted"
