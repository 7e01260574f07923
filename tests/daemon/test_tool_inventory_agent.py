"""``GET /tools/inventory?session=&agent=``: the inventory of one agent of a session, a subagent
included — its ``offered`` is the tool list its model requests carried, its ``loaded`` what it
loaded itself, its ``searchable`` what it can still load. Without ``agent`` the answer is the main
agent's, as before. An agent the session does not have is 404 ``AGENT_NOT_FOUND``; ``agent``
without ``session``, empty, too long or given twice is 400. A real daemon whose scripted model
(openai-chat) has the main agent start two subagents one after the other: one without a tool
list that loads a deferred tool, one restricted to two tools; with PTC, each subagent's ``ptc``
view is its own."""

from __future__ import annotations

from typing import Any

import trio

from tools.catalog import PTC

from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, error_of

def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


async def inventory(d: Daemon, token: str, **params: str) -> dict[str, Any]:
    r = await d.get("/tools/inventory", token, params=params)
    assert r.status_code == 200, r.text[:300]
    return r.json()


async def test_a_subagents_inventory_is_what_its_requests_offered_and_what_it_loaded(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(
        chat_stream(calls=[("call_a", "subagent", {"prompt": "what time is it?"})]),              # main
        chat_stream(calls=[("call_s", "capability_search", {"query": "current time", "limit": 1})]),  # sub a
        chat_stream(text="it is late"),                                                            # sub a
        chat_stream(calls=[("call_b", "subagent", {"prompt": "wait", "tools": ["read_file", "sleep_milliseconds"]})]),
        chat_stream(text="waited"),                                                                # sub b
        chat_stream(text="all done"))                                                              # main
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "models": [{"id": "chat-test"}]}],
        "defaultModel": "loop/chat-test", "tools": {"deferred": ["get_system_time", "sleep_milliseconds"]}})
    token = await d.pair("inventory-agent", strong=True)
    reader = await d.pair("inventory-agent-reader", strong=False)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "delegate")
    await d.wait_idle(token, sid)
    assert len(loop.bodies) == 6
    view = await d.view(token, sid)
    subs = [a["agentId"] for a in view["agents"] if a["role"] == "subagent"]
    assert len(subs) == 2 and all(a["status"] == "completed" for a in view["agents"][1:]), view["agents"]
    sub_a, sub_b = subs

    # The subagent that loaded a deferred tool: offered what its last request carried.
    a_first, a_second = offered(loop.bodies[1]), offered(loop.bodies[2])
    assert "get_system_time" not in a_first and "get_system_time" in a_second and "capability_search" in a_second
    inv = await inventory(d, reader, session=sid, agent=sub_a)  # (read trust is enough)
    assert inv["agent"] == sub_a and inv["session"] == sid
    assert sorted(inv["offered"]) == sorted(a_second) and inv["visibility"]["offered"] == len(a_second)
    assert inv["loaded"] == ["get_system_time"] and inv["visibility"]["loaded"] == 1
    assert inv["searchable"] == ["sleep_milliseconds"] and inv["visibility"]["searchable"] == 1
    assert sorted(inv["defaultAllowed"]) == sorted(a_first)  # (had it loaded nothing: its first request)
    main_only = {t["name"] for t in inv["tools"] if t["mainOnly"]}
    assert "subagent" in main_only and not main_only & set(inv["offered"]) and inv["ptc"] is None

    # The restricted subagent: its two tools, both offered (naming a deferred tool offers it).
    b_only = offered(loop.bodies[4])
    assert sorted(b_only) == ["read_file", "sleep_milliseconds"]
    inv_b = await inventory(d, token, session=sid, agentId=sub_b)  # (agentId: the same parameter)
    assert inv_b["agent"] == sub_b and sorted(inv_b["offered"]) == sorted(b_only)
    assert inv_b["loaded"] == [] and inv_b["searchable"] == [] and inv_b["visibility"]["offered"] == 2

    # The main agent's answer is as before: its own list (the subagent's load is not its own),
    # without an ``agent`` field; agent=main is that answer, named.
    main = await inventory(d, token, session=sid)
    assert "agent" not in main and main["loaded"] == [] and "get_system_time" not in main["offered"]
    assert sorted(main["offered"]) == sorted(offered(loop.bodies[5]))
    assert "subagent" in main["offered"]
    assert await inventory(d, token, session=sid, agent="main") == main | {"agent": "main"}
    # What is not about an agent is the same in every agent's answer.
    same = ("tools", "catalog", "runtimeRegistry", "mappingGaps", "executionProfile", "sessionToolPolicy")
    assert {k: inv[k] for k in same} == {k: main[k] for k in same}


async def test_the_agent_parameter_is_checked(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}],
                                     "defaultModel": "faux/faux-1"})
    token = await d.pair("inventory-agent", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    async def refused(params: Any, status: int, code: str, *words: str) -> None:
        r = await d.get("/tools/inventory", token, params=params)
        assert (r.status_code, error_of(r)) == (status, code), r.text[:300]
        message = r.json()["error"]["message"]
        assert all(w in message for w in words), message

    await refused({"agent": "main"}, 400, "INVALID_ARGUMENT", "agent", "session")
    await refused({"agentId": "main"}, 400, "INVALID_ARGUMENT", "session")
    await refused({"session": sid, "agent": "sub_nobody"}, 404, "AGENT_NOT_FOUND", sid, "sub_nobody")
    await refused({"session": sid, "agent": ""}, 400, "INVALID_ARGUMENT", "agent")
    await refused({"session": sid, "agent": "a" * 201}, 400, "INVALID_ARGUMENT", "agent", "200")
    await refused({"session": sid, "agent": "../x"}, 400, "INVALID_ARGUMENT", "agent")
    await refused([("session", sid), ("agent", "main"), ("agent", "main")], 400, "INVALID_ARGUMENT", "agent")
    await refused({"session": sid, "agent": "main", "agentId": "main"}, 400, "INVALID_ARGUMENT", "agentId")
    await refused({"session": "nope", "agent": "main"}, 404, "SESSION_NOT_FOUND")
    assert (await inventory(d, token, session=sid, agent="main"))["agent"] == "main"


async def test_a_subagents_ptc_view_is_its_own(daemon_factory: DaemonFactory) -> None:
    # With PTC, an agent's requests offer its eager tools and the entry; the rest is reached from
    # a program: for a subagent, of its own tools (no main-only one; a tool list narrows both).
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "kickoff", "toolCalls": [
            {"name": "subagent", "arguments": {"prompt": "look around"}},
            {"name": "subagent", "arguments": {"prompt": "read a file", "tools": [PTC, "read_file"]}}]},
    ]}], "defaultModel": "faux/faux-1", "localPtc": {}, "tools": {"deferred": ["get_system_time"]}}
    d = await daemon_factory(config=config)
    token = await d.pair("inventory-agent", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "kickoff")
    await d.wait_idle(token, sid)
    started = {e["agent_id"]: e["body"]["tools"] for e in await d.events(token, sid) if e["kind"] == "agent.started"}
    assert len(started) == 2, started
    free, narrowed = (next(a for a, tools in started.items() if bool(tools) is b) for b in (False, True))

    main = (await inventory(d, token, session=sid))["ptc"]
    assert main["native"] and "subagent" in main["native"] and main["fromProgram"] == ["get_system_time"]
    inv = await inventory(d, token, session=sid, agent=free)
    main_only = {t["name"] for t in inv["tools"] if t["mainOnly"]}
    assert inv["ptc"]["native"] == sorted(inv["offered"]) and PTC in inv["ptc"]["native"]
    assert not main_only & (set(inv["ptc"]["native"]) | set(inv["ptc"]["fromProgram"]))
    assert inv["ptc"]["fromProgram"] == ["get_system_time"]
    assert set(inv["ptc"]["native"]) == set(main["native"]) - main_only
    inv = await inventory(d, token, session=sid, agent=narrowed)
    assert inv["ptc"] == {"native": sorted([PTC, "read_file"]), "nativeCapabilities": None, "fromProgram": []}
    assert sorted(inv["offered"]) == sorted([PTC, "read_file"])
