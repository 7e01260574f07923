"""The daemon stopping while a project's executor child starts: the pool's own stop of that child
(its SIGTERM, and the SIGKILL when that did not end it) is not a death from outside, so no other
child is started for the call that asked. The executor's test hold (``LENS_EXECUTOR_TEST_HOLD``,
read only with ``LENS_EXECUTOR_TEST_HOOKS=1``) keeps the child at an exact point of its start.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio

from tests.procfs import processes
from tests.executor_hold import held_at

from .conftest import LIMIT, DaemonFactory

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


@pytest.mark.parametrize("point", ["before_listening", "before_hello"])
async def test_a_daemon_stopped_while_an_executor_starts_starts_no_other(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, point: str) -> None:
    held = held_at(monkeypatch, tmp_path, point)
    caplog.set_level(logging.INFO, logger="lens.executors")
    d = await daemon_factory(config=FAUX)
    token = await d.pair("stop-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "/tool run_command " + json.dumps({"command": "echo ran >> ran.txt"}))
    with trio.fail_after(LIMIT):
        while not held.exists():
            await trio.sleep(0.01)
    pid = int(held.read_text())
    d.stop.set()  # (the daemon stops while its child for the command is held in its start)
    with trio.fail_after(LIMIT):
        await d.done.wait()
    messages = [r.getMessage() for r in caplog.records if r.name == "lens.executors"]
    assert not [m for m in messages if "starting another" in m or "killed" in m], messages
    assert not [m for m in messages if " on port " in m], messages  # (no child was started after it)
    assert not [p for p in processes() if p.pid == pid or (b"executor" in p.argv and b"serve" in p.argv
                                                           and str(project["workspace"]).encode() in p.argv)]
    assert not (Path(project["workspace"]) / "ran.txt").exists()
