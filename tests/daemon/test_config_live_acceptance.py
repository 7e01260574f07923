"""Every config key changed while the daemon runs (F-API-4, docs/http-api.md "Config files"): a main config written
through ``PUT /config/files/{name}`` or edited on disk is read at the daemon's next start; the
running daemon keeps the one it started with — for sessions created after the change too — and
the next start takes the new one. (The pair file is the exception, honoured within a second:
``test_configfiles.py``.)

One table: each row names a key, how its effect is seen over HTTP, and what is seen under the
two configs. The test starts the real daemon (loopback port 0) on one config, writes the other
(each way: A to B and B to A; through the API and on disk), sees every effect unchanged, restarts
on the same directory and sees every effect changed. Every wait is bounded.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import pytest
import trio

from .conftest import Daemon, DaemonFactory, LIMIT, error_of, run_tool

# Config A sets every key the table reads; config B is the built-in defaults.
A: dict[str, Any] = {
    "server": {"maxBodyBytes": 200_000, "heartbeatSeconds": 0.1},
    "log": {"maxEventBytes": 65_536},
    "providers": [
        {"id": "alt", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50_000}]},
        {"id": "faux", "protocol": "faux", "enabled": False, "models": [{"id": "faux-1"}]},  # the built-in one, disabled
    ],
    "defaultModel": "alt/m1",
    "context": {"compaction": {"auto": False, "triggerPercent": 50},
                "pruneToolResults": {"enabled": True, "keepRecentRounds": 5, "minTokens": 10}},
    "web": {"allowPrivateAddresses": True},
    "webSearch": {"baseUrl": None},
    "mcpServers": {"idle": {"command": "true", "enabled": False}},
    "tools": {"deferred": ["sleep_milliseconds"], "policy": {"get_system_time": {"enabled": False}}},
    "localPtc": {"enabled": True},
}
B: dict[str, Any] = {}
CONFIGS = {"A": A, "B": B}


@dataclass
class Probe:
    """The daemon under test, a strong credential, and one project (made on first use) whose
    sessions run the tools. Every observation makes its own session: a new session takes the
    config the daemon holds, so none can see a change the daemon has not taken."""

    d: Daemon
    token: str
    project_id: str | None = None
    ids: Any = field(default_factory=itertools.count)

    def rid(self) -> str:
        return f"r{next(self.ids)}"

    async def session(self) -> str:
        if self.project_id is None:
            self.project_id = (await self.d.project(self.token))["id"]
        return (await self.d.session(self.token, self.project_id))["id"]

    async def tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return await run_tool(self.d, self.token, await self.session(), self.rid(), name, args)

    async def inventory(self) -> dict[str, Any]:
        r = await self.d.get("/tools/inventory", self.token)
        assert r.status_code == 200, r.text
        return r.json()

    async def models(self) -> dict[str, Any]:
        r = await self.d.get("/models", self.token)
        assert r.status_code == 200, r.text
        return r.json()


async def body_refused(p: Probe) -> bool:
    # 300,000 bytes: past A's 200,000, under the built-in 1 MiB
    r = await p.d.post("/sessions/no-such-session/abort", p.token, {"pad": "x" * 300_000})
    return r.status_code == 413 and error_of(r) == "BODY_TOO_LARGE"


async def pinged_within_a_second(p: Probe) -> bool:
    async with p.d.sse(p.token, params={"session": "quiet-session"}) as stream:
        with trio.move_on_after(1.0):  # A pings every 0.1 s; the built-in 15 s sends none in 1 s
            while True:
                msg = await stream.next(LIMIT)
                if msg is not None and msg.comment == "ping":
                    return True
    return False


async def providers(p: Probe) -> bool:
    return "alt" in {m["provider"] for m in (await p.models())["models"]}


async def builtin_faux_enabled(p: Probe) -> Any:
    return [(m["id"], m["enabled"]) for m in (await p.models())["models"] if m["provider"] == "faux"]


async def default_model(p: Probe) -> str:
    return (await p.models())["default"]["effective"]


async def context_window(p: Probe) -> int:
    sid = await p.session()
    r = await p.d.get(f"/sessions/{sid}/context", p.token)
    assert r.status_code == 200, r.text
    return r.json()["contextWindow"]


async def context_settings(p: Probe) -> dict[str, Any]:
    sid = await p.session()
    r = await p.d.get(f"/sessions/{sid}/context", p.token)
    assert r.status_code == 200, r.text
    settings = r.json()["settings"]
    settings.pop("sources")
    return settings


async def event_refused(p: Probe) -> bool:
    # 100,000 bytes of text: past A's 65,536-byte events, within its 200,000-byte bodies
    sid = await p.session()
    r = await p.d.post(f"/sessions/{sid}/inputs", p.token, {"requestId": p.rid(), "content": "y" * 100_000})
    if r.status_code == 202:
        await p.d.wait_idle(p.token, sid)
        return False
    assert r.status_code == 413 and error_of(r) == "APPEND_REJECTED", r.text
    return True


async def loopback_fetch(p: Probe) -> str | None:
    body = await p.tool("web_fetch", {"url": f"http://127.0.0.1:{p.d.port}/api/v1/health"})
    return body.get("error_code")


async def search_unset(p: Probe) -> bool:
    # Both ways web_search is not configured (no EXA_API_KEY); A names the baseUrl, B the key.
    body = await p.tool("web_search", {"query": "lens"})
    assert body["error_code"] == "WEB_SEARCH_NOT_CONFIGURED", body
    return "webSearch.baseUrl" in body["content"][0]["text"]


async def mcp_servers(p: Probe) -> list[str]:
    return sorted(s["name"] for s in (await p.inventory())["mcpServers"])


async def time_tool_policy(p: Probe) -> dict[str, Any]:
    return (await p.inventory())["executionProfile"]["get_system_time"]["enabled"]


async def sleep_deferred(p: Probe) -> bool:
    return next(t["deferred"] for t in (await p.inventory())["tools"] if t["name"] == "sleep_milliseconds")


async def ptc_registered(p: Probe) -> bool:
    return "programmatic_tool_run" in (await p.inventory())["runtimeRegistry"]


Observe = Callable[[Probe], Awaitable[Any]]
# key -> (what is seen, under A, under B). Every row: read at the next start (README, F-API-4).
TABLE: list[tuple[str, Observe, Any, Any]] = [
    ("server.maxBodyBytes", body_refused, True, False),
    ("server.heartbeatSeconds", pinged_within_a_second, True, False),
    ("log.maxEventBytes", event_refused, True, False),
    ("providers (an entry added)", providers, True, False),
    ("providers[].enabled (a built-in disabled)", builtin_faux_enabled, [("faux/faux-1", False)],
     [("faux/faux-1", True)]),
    ("defaultModel", default_model, "alt/m1", "faux/faux-1"),
    ("providers[].models[].contextWindow", context_window, 50_000, 131_072),
    ("context.compaction / context.pruneToolResults", context_settings,
     {"autoCompaction": False, "compactionTriggerPercent": 50, "pruneToolResults": True,
      "pruneKeepRecentRounds": 5, "pruneMinTokens": 10},
     {"autoCompaction": True, "compactionTriggerPercent": 80, "pruneToolResults": False,
      "pruneKeepRecentRounds": 3, "pruneMinTokens": 1000}),
    ("web.allowPrivateAddresses", loopback_fetch, None, "ADDRESS_NOT_PUBLIC"),
    ("webSearch.baseUrl", search_unset, True, False),
    ("mcpServers", mcp_servers, ["idle"], []),
    ("tools.policy", time_tool_policy, {"value": False, "source": "config"}, {"value": True, "source": "default"}),
    ("tools.deferred", sleep_deferred, True, False),
    ("localPtc", ptc_registered, True, False),
]


async def observe_all(p: Probe) -> dict[str, Any]:
    return {key: await look(p) for key, look, _, _ in TABLE}


def expected(name: str) -> dict[str, Any]:
    column = 2 if name == "A" else 3
    return {row[0]: row[column] for row in TABLE}


@pytest.mark.parametrize("how", ["api", "disk"])
@pytest.mark.parametrize("start, then", [("A", "B"), ("B", "A")])
async def test_every_key_is_read_at_the_next_start(daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch,
                                                   how: str, start: str, then: str) -> None:
    monkeypatch.delenv("EXA_API_KEY", raising=False)
    d = await daemon_factory(config=CONFIGS[start])
    token = await d.pair("config-client", strong=True)
    assert await observe_all(Probe(d, token)) == expected(start)

    text = json.dumps(CONFIGS[then], indent=2)
    if how == "api":
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        assert r.status_code == 200, r.text
        assert r.json()["unknownKeys"] == [] and r.json()["appliesAt"] == "nextStart"
    else:
        (d.config_dir / "lens.jsonc").write_text(text)
    # The running daemon keeps the config it started with, for new sessions too.
    assert await observe_all(Probe(d, token)) == expected(start)

    await d.client.aclose()
    d.stop.set()
    with trio.fail_after(LIMIT):
        await d.done.wait()
    again = await daemon_factory(root=d.root)
    assert await observe_all(Probe(again, token)) == expected(then)


async def test_a_write_says_when_it_applies(daemon: Daemon, strong: str) -> None:
    """A 200 to a config write said nothing of when it takes effect: a writer of the main config
    could take it as applied while the daemon kept the one it started with. The answer's
    ``appliesAt`` says it: ``nextStart`` (the main config), ``watched`` (the pair file, honoured
    within a second), ``notRead`` (another file of the directory: the daemon reads none)."""
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{"server": {"heartbeatSeconds": 0.1}}'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text
    pair = (await daemon.get("/config/files/pair.json", strong)).json()
    r = await daemon.put("/config/files/pair.json", strong, {"text": pair["text"], "expectDigest": pair["digest"]})
    assert r.status_code == 200 and r.json()["appliesAt"] == "watched", r.text
    (daemon.config_dir / "notes.json").write_text("{}")  # (listed, and so written, once it exists)
    r = await daemon.put("/config/files/notes.json", strong, {"text": '{"a": 1}'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "notRead", r.text
    assert set(r.json()) == {"name", "role", "written", "digest", "unknownKeys", "unknownKeysTotal",
                             "unknownKeysMeant", "appliesAt"}
    # The running daemon still pings at its start's 15 s: nothing in a second.
    assert await pinged_within_a_second(Probe(daemon, strong)) is False
