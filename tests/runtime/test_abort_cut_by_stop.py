"""F-CTX-5: an abort that a graceful stop cuts while it waits for the run it cancelled still
leaves the usage of the model request it cut off in the log.

The abort cancels the run, waits for it to end, then records the abort (the request's
``model.failed`` with what the provider had reported). A stop that cancelled the session's actor
during that wait ended the abort before its record, and the run, seeing an abort under way, left
the record to it: neither ``model.failed`` nor ``model.cut_off`` was written, and tokens the
provider had reported were lost. Now the cut abort records ``model.cut_off`` for the requests it
cut off (they stay open; the next start asks them again).

The real store and supervisor, an Anthropic provider built from config (the official SDK) against a
loopback Messages server that reports its input tokens in ``message_start`` and then stalls. The
stop lands a varying number of scheduling steps after the abort was sent, so that it cuts the
abort before, during and after its wait (trio's run order within a step varies): in every case
the reported tokens are in the log once."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from conftest import open_runtime, text
from events.reader import LogReader
from projections.session_state import SessionState, fold
from runtime.actor import Abort, Submit
from runtime.config import parse_config
from runtime.providers.catalog import build_catalog
from tests.providers.servers.anthropic import message_stream
from tests.providers.servers.base import ScriptedServer

ATTEMPTS = 24
REPORTED = 321


async def _one(tmp: Path, url: str, server: ScriptedServer, steps: int) -> tuple[list[str], int]:
    """A stream begun, an abort sent, the actors cancelled ``steps`` steps later under a stop:
    the kinds the log holds after it and the input tokens the session counts."""
    server.push(message_stream(text=["Hel", "lo"], usage={"input_tokens": REPORTED, "output_tokens": 1},
                               stall_after=4))
    cfg = parse_config(f'{{"providers": [{{"id": "claude", "protocol": "anthropic", "baseUrl": "{url}", '
                       f'"models": [{{"id": "claude-test", "contextWindow": 50000}}]}}], '
                       f'"defaultModel": "claude/claude-test"}}')
    catalog = build_catalog(cfg, environ={}, max_retries=0)
    stopping = trio.Event()
    asked = len(server.requests)
    async with open_runtime(tmp, catalog=catalog, stopping=stopping) as rt:
        sid = await rt.session(model="claude/claude-test")
        await rt.call(sid, Submit("r1", text("a long answer, please"), "followUp"))
        with trio.fail_after(10):
            while len(server.requests) == asked:
                await trio.sleep(0.01)
            # (the daemon's tasks all wait for frames that never come: the meter has the counts)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        stopping.set()
        async with trio.open_nursery() as caller:
            caller.start_soon(rt.call, sid, Abort())
            for _ in range(steps):
                await trio.lowlevel.checkpoint()
            caller.cancel_scope.cancel()  # (the client's request goes with the stop)
        # (leaving the runtime cancels its actors: the daemon's services at a stop)
    await catalog.aclose()
    with LogReader(tmp) as log:
        events = list(log.events(session_id=sid))
    state = fold(SessionState(sid), events)
    return [e.kind for e in events], state.usage.input_tokens or 0


async def test_an_abort_cut_by_a_stop_leaves_the_usage_of_the_request_it_cut_off(tmp_path: Path, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    lost = []
    for attempt in range(ATTEMPTS):
        steps = attempt % 8
        kinds, counted = await _one(tmp_path / f"a{attempt}", url, server, steps)
        recorded = kinds.count("model.cut_off") + kinds.count("model.failed")
        if counted != REPORTED or recorded != 1:
            lost.append((steps, counted, [k for k in kinds if k.startswith("model.") or k == "run.aborted"]))
    assert lost == [], lost
