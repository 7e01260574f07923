"""The sweep of ``artifacts/`` while the daemon serves (``runtime.artifact_sweep.sweep_live`` and
``ArtifactSweeper``) over a real log, its projections and an artifact store: an artifact whose
event is still to come is never taken, whether the sweep meets it held by its call, or the event
commits while the sweep runs; an artifact no event names goes without a restart. The races are
driven by trio events (a call parked between its store and its append), not by sleeps."""

from __future__ import annotations

import contextvars
from pathlib import Path

import trio

from events.store import Draft, EventStore, open_store
from events.types import ImagePart, InputSubmitted, TextPart
from runtime.artifact_sweep import ArtifactSweeper, sweep_artifacts, sweep_live
from runtime.projection_service import ProjectionService
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.artifacts import ArtifactStore
from tools.base import ToolResult, ToolSpec


async def name_in_log(log: EventStore, aid: str, n: int) -> None:
    await log.append(Draft(InputSubmitted(content=[TextPart("see"), ImagePart(aid, "image/png")]),
                           project_id="p1", session_id="s1", agent_id="main", request_id=f"r{n}"))


async def orphan(artifacts: ArtifactStore, data: bytes) -> str:
    """An artifact stored by a call whose result was never recorded (its lease ended so)."""
    with artifacts.lease():
        return await trio.to_thread.run_sync(artifacts.put, data)


def files(artifacts: ArtifactStore) -> set[str]:
    return {p.name for p in artifacts.root.iterdir()}


async def test_an_artifact_held_by_its_call_stays_and_an_orphan_goes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    async with open_store(data) as log:
        service = ProjectionService(data, log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                lost = await orphan(artifacts, b"lost")
                with artifacts.lease() as lease:
                    named = await trio.to_thread.run_sync(artifacts.put, b"named")
                    await name_in_log(log, named, 1)
                    lease.recorded()
                stored, go, done = trio.Event(), trio.Event(), trio.Event()
                held: list[str] = []

                async def call() -> None:  # stores, then waits (its append on a lock, say), then records
                    with artifacts.lease() as lease:
                        held.append(await trio.to_thread.run_sync(artifacts.put, b"in flight"))
                        stored.set()
                        await go.wait()
                        await name_in_log(log, held[0], 2)
                        lease.recorded()
                    done.set()

                nursery.start_soon(call)
                with trio.fail_after(20):
                    await stored.wait()
                    assert artifacts.in_flight() == {held[0]}
                    swept = await sweep_live(artifacts, service, lambda: log.last_seq)
                assert (swept.artifacts, swept.partial, swept.notes) == (1, 0, [])
                assert files(artifacts) == {named, held[0]} and lost not in files(artifacts)
                go.set()
                with trio.fail_after(20):
                    await done.wait()
                    assert artifacts.in_flight() == set()
                    swept = await sweep_live(artifacts, service, lambda: log.last_seq)
                assert (swept.artifacts, swept.notes) == (0, [])
                assert files(artifacts) == {named, held[0]}
                assert artifacts.get(held[0]) == b"in flight"
                nursery.cancel_scope.cancel()
        finally:
            service.close()


async def test_an_event_committed_while_the_sweep_runs_keeps_its_artifact(tmp_path: Path) -> None:
    """The sweep has read the log's last seq; then a call stores, its event commits and its
    hold ends, all before the sweep looks the ids up, in projections that have not folded that
    event yet (their service stopped, so they stay at the seq the sweep read)."""
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    async with open_store(data) as log:
        service = ProjectionService(data, log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                lost = await orphan(artifacts, b"lost")
                again = await orphan(artifacts, b"stored again")
                await name_in_log(log, "0" * 64, 1)
                await service.caught_up(log.last_seq)
                nursery.cancel_scope.cancel()  # (the projections stay at this seq)
            with artifacts.sweeping() as began:
                log_seq = log.last_seq
                with artifacts.lease() as lease:
                    late = await trio.to_thread.run_sync(artifacts.put, b"committed late")
                    await name_in_log(log, late, 2)
                    lease.recorded()
                # the same bytes as an orphan stored again, by a call whose event is still to come
                assert await orphan(artifacts, b"stored again") == again
                swept = await sweep_artifacts(artifacts, service, log_seq, began)
            assert service.position == log_seq < log.last_seq
            assert (swept.artifacts, swept.notes) == (1, [])
            assert files(artifacts) == {late, again} and lost not in files(artifacts)
        finally:
            service.close()


async def test_the_sweeper_runs_on_its_schedule_and_after_a_result_not_recorded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    said: list[str] = []
    async with open_store(data) as log:
        service = ProjectionService(data, log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                sweeper = ArtifactSweeper(artifacts, service, lambda: log.last_seq, said.append, every=3600, gap=0)
                await nursery.start(sweeper.run)
                with artifacts.lease() as lease:  # recorded: no sweep asked for
                    kept = await trio.to_thread.run_sync(artifacts.put, b"kept")
                    await name_in_log(log, kept, 1)
                    lease.recorded()
                assert sweeper.sweeps == 0
                swept = sweeper.swept
                lost = await orphan(artifacts, b"lost")  # a lease ending unrecorded asks for one
                with trio.fail_after(20):
                    await swept.wait()
                assert sweeper.sweeps == 1
                assert files(artifacts) == {kept} and lost not in files(artifacts)
                assert said == [f"lens: removed 1 artifact(s) no event names and 0 partial file(s) of "
                                f"interrupted writes from {artifacts.root}"]
                nursery.cancel_scope.cancel()
            # on its schedule: a file from before (another store's, as a previous run's) goes
            before = ArtifactStore(artifacts.root).put(b"from before")
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                sweeper = ArtifactSweeper(artifacts, service, lambda: log.last_seq, said.append, every=0.05)
                await nursery.start(sweeper.run)
                with trio.fail_after(20):
                    while before in files(artifacts):
                        await sweeper.swept.wait()
                assert files(artifacts) == {kept}
                nursery.cancel_scope.cancel()
        finally:
            service.close()


def test_a_put_outside_a_lease_or_after_it_ended_is_held_for_good(tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    outside = artifacts.put(b"outside")
    with artifacts.lease():
        inside = artifacts.put(b"inside")
        assert artifacts.in_flight() == {outside, inside}
        context = contextvars.copy_context()
    late = context.run(artifacts.put, b"late")  # (a thread a cancel left running: its lease has ended)
    assert artifacts.in_flight() == {outside, late}
    kept, failed = artifacts.remove([outside, inside, late])
    assert (sorted(kept), failed) == (sorted([outside, late]), [])
    assert files(artifacts) == {outside, late}


async def test_ids_held_for_good_are_let_go_once_the_log_names_them(tmp_path: Path) -> None:
    """Ids held for good (put outside a lease, or after it ended) were held until the daemon
    stopped: a set that only grew. A live sweep now lets go of those the log names (a named
    artifact is never removed), so after many artifacts only the ones whose event is still to
    come are held, and their files stay; round after round, the set never grows past one round."""
    data = tmp_path / "data"
    artifacts = ArtifactStore(data / "artifacts")
    async with open_store(data) as log:
        service = ProjectionService(data, log)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                outside = [artifacts.put(f"outside {i}".encode()) for i in range(300)]
                with artifacts.lease():
                    context = contextvars.copy_context()
                late = [context.run(artifacts.put, f"late {i}".encode()) for i in range(100)]
                assert artifacts.held_for_good() == set(outside) | set(late)
                waiting = outside[-5:] + late[-5:]  # (their event still to come)
                named = outside[:-5] + late[:-5]
                await log.append(Draft(InputSubmitted(content=[TextPart(" ".join(named))]), project_id="p1",
                                       session_id="s1", agent_id="main", request_id="many"))
                with trio.fail_after(20):
                    swept = await sweep_live(artifacts, service, lambda: log.last_seq)
                assert (swept.artifacts, swept.notes) == (0, [])
                assert artifacts.held_for_good() == set(waiting) == artifacts.in_flight()
                assert files(artifacts) == set(outside) | set(late)  # (nothing named or held went)
                await log.append(Draft(InputSubmitted(content=[TextPart(" ".join(waiting))]), project_id="p1",
                                       session_id="s1", agent_id="main", request_id="rest"))
                with trio.fail_after(20):
                    await sweep_live(artifacts, service, lambda: log.last_seq)
                assert artifacts.held_for_good() == set()
                largest = 0
                for round_ in range(5):
                    ids = [artifacts.put(f"round {round_} {i}".encode()) for i in range(100)]
                    largest = max(largest, len(artifacts.held_for_good()))
                    await log.append(Draft(InputSubmitted(content=[TextPart(" ".join(ids))]), project_id="p1",
                                           session_id="s1", agent_id="main", request_id=f"round{round_}"))
                    with trio.fail_after(20):
                        await sweep_live(artifacts, service, lambda: log.last_seq)
                    assert artifacts.held_for_good() == set(), round_
                assert largest == 100 and len(files(artifacts)) == 900
                nursery.cancel_scope.cancel()
        finally:
            service.close()


# ---------------------------------------------------------------- the actor holds its calls' artifacts


class Parked:
    """A tool that stores an artifact and waits for the test before it returns it, and one that
    stores one and returns more than an event may hold (its result is not recorded)."""

    def __init__(self) -> None:
        self.artifacts: ArtifactStore | None = None
        self.stored, self.go = trio.Event(), trio.Event()
        self.ids: list[str] = []

    async def shot(self, args, ctx):  # type: ignore[no-untyped-def]
        assert self.artifacts is not None
        aid = await trio.to_thread.run_sync(self.artifacts.put, b"\x89PNG parked")
        self.ids.append(aid)
        self.stored.set()
        await self.go.wait()
        return ToolResult([TextPart("shot"), ImagePart(aid, "image/png")])

    async def huge(self, args, ctx):  # type: ignore[no-untyped-def]
        assert self.artifacts is not None
        aid = await trio.to_thread.run_sync(self.artifacts.put, b"\x89PNG not recorded")
        self.ids.append(aid)
        return ToolResult.text(f"saved as artifact {aid} " + "x" * (33 * 1024 * 1024))  # past maxEventBytes


async def test_the_actor_holds_a_calls_artifacts_until_its_result_is_recorded(runtime_factory) -> None:  # type: ignore[no-untyped-def]
    parked = Parked()
    tools = [ToolSpec("shot", "Stores an image.", {"type": "object"}, parked.shot),
             ToolSpec("huge", "Stores an image, returns too much.", {"type": "object"}, parked.huge)]
    script = [FauxTurn(when="look", tool_calls=[FauxToolCall("shot")]),
              FauxTurn(when="big", tool_calls=[FauxToolCall("huge")])]
    async with runtime_factory(script=script, extra_tools=tools, projections=True) as rt:
        artifacts = parked.artifacts = rt.deps.artifacts = ArtifactStore(rt.data_dir / "artifacts")
        projections = ProjectionService(rt.data_dir, rt.store)
        poked: list[int] = []
        artifacts.on_orphans(lambda: poked.append(1))
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(projections.run)
                sid = await rt.session()
                await rt.submit(sid, "r1", "look")
                with trio.fail_after(30):
                    await parked.stored.wait()
                    assert artifacts.in_flight() == {parked.ids[0]}
                    swept = await sweep_live(artifacts, projections, lambda: rt.store.last_seq)
                assert (swept.artifacts, swept.notes) == (0, [])
                parked.go.set()
                await rt.idle(sid)
                assert artifacts.in_flight() == set() and poked == []
                await rt.run_to_idle(sid, "r2", "big")
                assert artifacts.in_flight() == set() and poked == [1]
                with trio.fail_after(30):
                    swept = await sweep_live(artifacts, projections, lambda: rt.store.last_seq)
                assert (swept.artifacts, swept.notes) == (1, [])
                assert files(artifacts) == {parked.ids[0]}  # the recorded one stays; the other went
                nursery.cancel_scope.cancel()
        finally:
            projections.close()
