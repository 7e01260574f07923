"""Requests in progress when the daemon stops are answered at the stop, 503
``SESSION_UNAVAILABLE``, not held for the shutdown's whole grace period (5 s) and then reset
unanswered; what the sessions recorded is kept, and a repeat after the restart is answered from it.

The waits are real: another session's command holds the workspace's execution-domain write lock,
so a ``/skill:`` input's check (it reads the workspace under the read lock), and a withdraw of
that input (decided once the check ended), wait for as long as it runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import trio
import trio.testing

from runtime.http_parts import RETRY_AFTER_SECONDS

from .conftest import LIMIT, error_of, wait_until

REVIEW = "---\nname: review\ndescription: Review code.\n---\nREVIEW-STEPS\n"
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": []}], "defaultModel": "faux/faux-1"}
GRACE = 5.0  # the daemon's wait for requests in progress at a stop (hypercorn's graceful_timeout)


async def test_requests_waiting_on_a_session_are_answered_at_a_stop(daemon_factory, nursery):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("stop-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "skills" / "review").mkdir(parents=True)
    (ws / "skills" / "review" / "SKILL.md").write_text(REVIEW)
    sid = (await d.session(token, project["id"]))["id"]
    other = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r0", "hello")
    await d.wait_idle(token, sid)
    hold = {"command": "touch started && sleep 600", "timeout_ms": 900000}
    await d.submit(token, other, "o1", f"/tool run_command {json.dumps(hold)}")
    await wait_until(lambda: trio.to_thread.run_sync((ws / "started").exists), what="the command holding the workspace")

    answers: dict[str, object] = {}

    async def ask(name: str, method: str, path: str, body: object = None) -> None:
        answers[name] = await d.request(method, path, token, json_body=body)

    nursery.start_soon(ask, "skill", "POST", f"/sessions/{sid}/inputs", {"requestId": "s1", "content": "/skill:review go"})

    async def waiting() -> bool:  # the skill input's check is pending: the view says running
        return (await d.view(token, sid))["status"] == "running"

    await wait_until(waiting, what="the skill input's check waiting")
    # A withdraw of it is decided once its check ended: it waits as long.
    nursery.start_soon(ask, "withdraw", "POST", f"/sessions/{sid}/inputs/s1/withdraw", {})
    with trio.fail_after(LIMIT):  # (the daemon runs in this trio run: all blocked = the withdraw waits)
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert answers == {}
    assert answers == {}
    began = time.monotonic()
    d.stop.set()

    async def all_answered() -> bool:
        return len(answers) == 2

    await wait_until(all_answered, timeout=GRACE - 1, what="both requests answered at the stop")
    assert time.monotonic() - began < GRACE - 1
    for name, r in answers.items():
        assert (r.status_code, error_of(r)) == (503, "SESSION_UNAVAILABLE"), (name, r.text)
        assert r.headers.get("retry-after") == str(RETRY_AFTER_SECONDS), (name, r.headers)  # (back once restarted)
        assert "stopping" in r.json()["error"]["message"], r.text
    with trio.fail_after(LIMIT):
        await d.done.wait()
    await d.client.aclose()

    # What was recorded is kept; the input sent again with its request id is recorded once.
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "s1", "content": "/skill:review go"})
    assert r.status_code == 202, r.text
    await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    assert [e["request_id"] for e in events if e["kind"] == "input.submitted"] == ["r0", "s1"]
    assert (await d2.get(f"/sessions/{sid}/context", token)).status_code == 200

