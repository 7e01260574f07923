"""F-ACT-5 over HTTP: subagents started by the model's tool calls, their status, results and
what an abort does to them."""

from __future__ import annotations

from .conftest import stop_daemon, wait_until

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "repeat", "toolCalls": [{"name": "subagent", "arguments": {
        "prompt": "SUBJOB tell the time", "tools": ["get_system_time"] * 1000 + ["sleep_milliseconds"]}}]},
    {"when": "wait", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBWAIT"}}]},
    {"when": "SUBWAIT", "toolCalls": [{"name": "sleep_milliseconds", "arguments": {"milliseconds": 600000}}]},
    {"when": "SUBJOB", "text": "noon"},
]}], "defaultModel": "faux/faux-1"}


async def _session(d):
    token = await d.pair("sub-client", strong=True)
    return token, (await d.session(token, (await d.project(token))["id"]))["id"]


async def _subagent_calling(d, token: str, sid: str) -> list:
    """Wait until a subagent of ``sid`` started a tool call; its ``tool.started`` events."""
    async def started():
        return [e for e in await d.events(token, sid)
                if e["kind"] == "tool.started" and e["agent_id"].startswith("sub_")]

    return await wait_until(started, what="a subagent's tool call")


async def test_a_tool_list_is_recorded_with_each_name_once(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "repeat")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [started] = [e for e in events if e["kind"] == "agent.started"]
    assert started["body"]["tools"] == ["get_system_time", "sleep_milliseconds"]
    [finished] = [e for e in events if e["kind"] == "tool.finished"]
    assert (finished["body"]["status"], finished["body"]["content"][0]["text"]) == ("ok", "noon")


async def test_an_abort_ends_a_running_subagent_and_a_restart_keeps_it_ended(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "wait")

    await _subagent_calling(d, token, sid)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True
    # The subagent ends (its open call, then agent.finished) before its parent's call is
    # settled, as in a run that is not aborted.
    ends = [(e["kind"], e["agent_id"] == "main", e["body"].get("status")) for e in await d.events(token, sid)
            if e["kind"] in ("tool.finished", "agent.finished", "task.finished")]
    assert ends == [("tool.finished", False, "interrupted"), ("agent.finished", False, "aborted"),
                    ("tool.finished", True, "interrupted"), ("task.finished", True, "aborted")]
    view = await d.view(token, sid)
    assert view["status"] == "idle"
    assert [(a["role"], a["status"]) for a in view["agents"]] == [("main", "idle"), ("subagent", "aborted")]
    listed = (await d.get("/sessions", token)).json()["sessions"]
    assert [s["status"] for s in listed] == ["idle"]
    before = await d.events(token, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await d2.events(token, sid) == before  # nothing re-run, nothing written twice
    assert (await d2.view(token, sid))["agents"] == view["agents"]


async def test_a_fork_made_while_a_subagent_ran_shows_it_and_its_call_interrupted(daemon_factory):
    # The fork does not run what was under way at its seq: the model is told the parent's call has
    # no result (interrupted), and the view says so of the call and of its subagent, instead of a
    # call "pending" for ever and a subagent "finished" with no result.
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "wait")

    [started] = await _subagent_calling(d, token, sid)
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": started["seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["status"] == "idle"
    assert [(a["role"], a["status"]) for a in fork["agents"]] == [("main", "idle"), ("subagent", "interrupted")]
    [call] = [it["call"] for it in fork["items"] if it["role"] == "tool_call"]
    assert (call["name"], call["status"]) == ("subagent", "interrupted")
    # The source still runs both; the fork's view of itself stays as it was made after a restart.
    source = await d.view(token, sid)
    assert [a["status"] for a in source["agents"]] == ["running", "running"]
    assert [it["call"]["status"] for it in source["items"] if it["role"] == "tool_call"] == ["running"]
    await d.post(f"/sessions/{sid}/abort", token)
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    again = await d2.view(token, fork["id"])
    assert (again["agents"], again["items"]) == (fork["agents"], fork["items"])


async def test_subagents_of_two_sessions_run_at_once_and_an_abort_ends_only_its_own(daemon_factory):
    # A session's tool calls run one at a time (so its subagents do); sessions run side by side.
    d = await daemon_factory(config=CONFIG)
    token, first = await _session(d)
    second = (await d.session(token, (await d.project(token, "q"))["id"]))["id"]
    for sid in (first, second):
        await d.submit(token, sid, "r1", "wait")

    async def both_sleeping():
        views = [await d.view(token, sid) for sid in (first, second)]
        return views if all([a["status"] for a in v["agents"]] == ["running", "running"] for v in views) else None

    await wait_until(both_sleeping)
    r = await d.post(f"/sessions/{first}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True
    assert [a["status"] for a in (await d.view(token, first))["agents"]] == ["idle", "aborted"]
    assert [a["status"] for a in (await d.view(token, second))["agents"]] == ["running", "running"]
    assert not [e for e in await d.events(token, second) if e["kind"] in ("agent.finished", "run.aborted")]
    await d.post(f"/sessions/{second}/abort", token)
    assert [a["status"] for a in (await d.view(token, second))["agents"]] == ["idle", "aborted"]
