"""F-MOD-3's last clause end to end: "history and permissions keep the internal id". A tool
whose id is no native name is offered and called under its digest alias; the execution policy
written for its internal id is the one that judges the call, and the log names the internal id."""

from __future__ import annotations

import sys
from typing import Any

import trio

from runtime.providers.names import alias_for

from ..mcp.conftest import SERVER
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import DaemonFactory, finished

INTERNAL = "mcp__my-server__some.tool"


async def test_a_policy_for_the_internal_id_judges_a_call_made_under_the_alias(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    alias = alias_for(INTERNAL)
    assert alias != INTERNAL
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(chat_stream(calls=[("call_1", alias, {})]), chat_stream(text="done"))
    config: dict[str, Any] = {
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "models": [{"id": "chat-test"}]}],
        "defaultModel": "loop/chat-test",
        "mcpServers": {"my-server": {"command": sys.executable, "args": [SERVER, "--dotted"]}},
        # the internal id's entry warns; an entry under the alias (a name no tool has) must not apply
        "tools": {"policy": {INTERNAL: {"approval": "warn"}, alias: {"enabled": False}}}}
    d = await daemon_factory(config=config)
    token = await d.pair("alias-policy", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "go")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    [body] = finished(events)
    assert body["name"] == INTERNAL and not body["is_error"], body  # the log keeps the internal id
    texts = [part["text"] for part in body["content"]]
    assert texts[0] == "some.tool ran"
    assert any(f"[policy warning: {INTERNAL} runs under approval 'warn'" in x for x in texts), texts
    assert [e["body"]["name"] for e in events if e["kind"] == "tool.started"] == [INTERNAL]
    # the model saw the alias, in the tool list and in the call sent back with its result
    assert alias in [tool["function"]["name"] for tool in loop.bodies[0]["tools"]]
    assert [c["function"]["name"] for m in loop.bodies[1]["messages"] for c in m.get("tool_calls") or []] == [alias]
    # the inventory reports the effective profile under the internal id, with its source
    r = await d.get("/tools/inventory", token)
    assert r.status_code == 200, r.text
    inv = r.json()
    assert inv["executionProfile"][INTERNAL]["approval"] == {"value": "warn", "source": "config"}
    assert inv["executionProfile"][INTERNAL]["enabled"]["value"] is True and alias not in inv["executionProfile"]
    assert inv["mappingGaps"] == [{"name": INTERNAL, "alias": alias}]
