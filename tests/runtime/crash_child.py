"""Child process of tests/runtime/test_crash.py: the real actor runtime, waiting to be SIGKILLed.

Usage::

    python tests/runtime/crash_child.py DATA_DIR SCENARIO

It opens the real store on ``DATA_DIR``, starts a :class:`Supervisor` with the scripted faux
provider and the real tools (plus ``block_tool``, a test-only tool that is *not* replay safe),
creates one session and drives ``SCENARIO`` into the state where the parent kills it. It tells
the parent what happened on stdout, one flushed line each:

* ``SESSION <id>`` once the session exists;
* ``EVENT <seq> <kind>`` for every event committed to the log (a watcher task tails the store,
  so the line is printed only after the commit was acknowledged);
* ``ACK <request_id> <seq>`` for every acknowledged submission;
* ``DELTA <text>`` for every streamed model delta;
* ``READY`` once the scenario's setup is done (the parent's kill point is a marker, never a
  timer).

The parent imports this module too (:func:`make_tools`, :func:`make_script`, :func:`make_deps`)
to restart the runtime on the same data directory with the same script and tools.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from events.store import EventStore, open_store  # noqa: E402
from events.types import TextPart  # noqa: E402
from projections.snapshots import SnapshotStore  # noqa: E402
from runtime.actor import ActorDeps, Submit  # noqa: E402
from runtime.providers.catalog import ProviderCatalog  # noqa: E402
from runtime.providers.faux import FauxProvider, FauxTurn  # noqa: E402
from runtime.supervisor import Supervisor  # noqa: E402
from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec  # noqa: E402
from tools.registry import builtin_tools  # noqa: E402

SCENARIOS = ("tool_not_replay_safe", "tool_replay_safe", "model_stream", "queued_inputs")

BLOCK_TOOL = "block_tool"
REPLAY_SAFE_SLEEP_MS = 2000  # re-run in full after the restart; the kill comes at tool.started
LONG_MS = 600_000  # a delay the child never outlives: the parent kills it first
STREAM_CHUNKS = ["Hello", ", streamed", " world"]
STREAM_PROMPT = "please stream-me an answer"
FIRST_PROMPT = "alpha-busy first input"
FOLLOW_UPS = [f"follow-up number {i}" for i in range(2, 6)]
SNAPSHOT_EVERY = 3  # small, so snapshots are written during the run and used by the restart


async def _block(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    await trio.sleep(LONG_MS / 1000)
    return ToolResult.text("block_tool finished")


BLOCK_SPEC = ToolSpec(
    BLOCK_TOOL,
    "Test only: blocks for a long time; not safe to replay.",
    {"type": "object", "properties": {}, "additionalProperties": False},
    _block,
    replay_safe=False,
    read_only=False,
)


def make_tools() -> ToolRegistry:
    return builtin_tools([BLOCK_SPEC])


def make_script(phase: str) -> list[FauxTurn]:
    """The faux script; ``phase`` "run" streams slowly (the kill lands mid-stream), "resume" not."""
    slow = phase == "run"
    return [
        FauxTurn(when="stream-me", chunks=STREAM_CHUNKS, chunk_delay_ms=LONG_MS if slow else 0),
        FauxTurn(when="alpha-busy", text="answer to the first input", delay_ms=LONG_MS if slow else 0),
    ]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def make_deps(store: EventStore, provider: FauxProvider, on_delta: Any = None) -> ActorDeps:
    deps = ActorDeps(
        store,
        SnapshotStore.open(store.data_dir),
        ProviderCatalog({"faux": provider}),
        make_tools(),
        new_id,
        snapshot_every=SNAPSHOT_EVERY,
    )
    if on_delta is not None:
        deps.on_delta = on_delta
    return deps


def say(*parts: object) -> None:
    """One line in one write(2): a line written in pieces (print with PYTHONUNBUFFERED set writes
    each argument on its own) can be torn by the parent's SIGKILL."""
    os.write(1, (" ".join(map(str, parts)) + "\n").encode())


async def watch(store: EventStore, seen: dict[str, trio.Event]) -> None:
    """Print every committed event (after its commit); set ``seen[kind]`` on its first one."""
    after = 0
    while True:
        await store.wait_for(after)
        for ev in await store.read_events(after=after, limit=10_000):
            say("EVENT", ev.seq, ev.kind)
            seen.setdefault(ev.kind, trio.Event()).set()
            after = ev.seq


async def run(data_dir: Path, scenario: str) -> None:
    provider = FauxProvider("faux", make_script("run"))
    async with open_store(data_dir) as store:
        deps = make_deps(store, provider, lambda sid, agent, delta: say("DELTA", json.dumps(delta.text)))
        seen: dict[str, trio.Event] = {}

        def event(kind: str) -> trio.Event:
            return seen.setdefault(kind, trio.Event())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, store, seen)
            sup = Supervisor(deps)
            await nursery.start(sup.run)
            sid = await sup.create_session("p1")
            say("SESSION", sid)

            async def submit(request_id: str, text: str) -> None:
                res = await sup.call(sid, Submit(request_id, [TextPart(text)]))
                say("ACK", request_id, res["seq"])

            if scenario == "tool_not_replay_safe":
                await submit("r1", f"/tool {BLOCK_TOOL} {{}}")
            elif scenario == "tool_replay_safe":
                await submit("r1", f'/tool sleep_milliseconds {{"milliseconds": {REPLAY_SAFE_SLEEP_MS}}}')
            elif scenario == "model_stream":
                await submit("r1", STREAM_PROMPT)
            elif scenario == "queued_inputs":
                await submit("r1", FIRST_PROMPT)
                await event("model.requested").wait()  # busy: the first input's model call runs
                for i, text in enumerate(FOLLOW_UPS, start=2):
                    await submit(f"r{i}", text)
            else:
                raise SystemExit(f"unknown scenario {scenario!r}")
            say("READY")
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(run, Path(sys.argv[1]), sys.argv[2])
