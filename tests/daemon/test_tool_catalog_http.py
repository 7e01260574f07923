"""The tool planes in a running daemon (F-TOOL-2..4): a deferred tool is not offered to the
model until ``capability_search`` loads it, is offered from the next request on (also after a
restart), the inventory reports catalog, loaded/searchable tools, mapping gaps and the effective
execution profile with sources, and ``PATCH /sessions/{id}`` ``toolPolicy`` overrides the config
for that session only (durably)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

from ..mcp.conftest import SERVER
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, error_of, run_lens, stop_daemon

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


async def inventory(d: Daemon, token: str, sid: str | None = None) -> dict[str, Any]:
    r = await d.get("/tools/inventory", token, params={"session": sid} if sid else None)
    assert r.status_code == 200, r.text
    return r.json()


async def run_tool(d: Daemon, token: str, sid: str, request_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    await d.submit(token, sid, request_id, f"/tool {name} {json.dumps(args)}")
    await d.wait_idle(token, sid)
    return [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"][-1]


async def test_a_deferred_tool_is_offered_from_the_request_after_capability_search_loads_it_and_after_a_restart(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                             "models": [{"id": "chat-test"}]}],
              "defaultModel": "loop/chat-test", "sessions": {"snapshotEvery": 1},
              "tools": {"deferred": ["get_system_time", "sleep_milliseconds"]}}
    loop.push(chat_stream(calls=[("call_1", "capability_search", {"query": "current time", "limit": 1})]),
              chat_stream(text="done"))
    d = await daemon_factory(config=config)
    token = await d.pair("catalog-client", strong=True)
    project = (await d.project(token))["id"]
    sid = (await d.session(token, project))["id"]
    await d.submit(token, sid, "r1", "what time is it?")
    await d.wait_idle(token, sid)
    first, second = offered(loop.bodies[0]), offered(loop.bodies[1])
    assert "get_system_time" not in first and "sleep_milliseconds" not in first and "capability_search" in first
    assert "read_file" in first  # (eager tools as before)
    assert "get_system_time" in second and "sleep_milliseconds" not in second and "capability_search" in second
    loaded = [e for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert [e["body"]["capability_ids"] for e in loaded] == [["get_system_time"]]
    assert loaded[0]["body"]["call_id"] == "call_1" and loaded[0]["agent_id"] == "main"

    inv = await inventory(d, token, sid)
    assert inv["loaded"] == ["get_system_time"] and inv["searchable"] == ["sleep_milliseconds"]
    assert "get_system_time" in inv["offered"] and "sleep_milliseconds" not in inv["offered"]
    other = (await d.session(token, project))["id"]  # loads belong to one session's agent
    assert (await inventory(d, token, other))["loaded"] == []

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    loop.push(chat_stream(text="still here"))
    await d2.submit(token, sid, "r2", "and now?")
    await d2.wait_idle(token, sid)
    assert len(loop.bodies) == 3
    third = offered(loop.bodies[2])
    assert "get_system_time" in third and "sleep_milliseconds" not in third
    assert (await inventory(d2, token, sid))["loaded"] == ["get_system_time"]


async def test_a_deferred_tool_called_before_it_is_loaded_is_refused_then_runs(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "tools": {"deferred": ["get_system_time"]}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "get_system_time", {})
    assert body["is_error"] and body["error_code"] == "TOOL_NOT_LOADED"
    assert "capability_search" in body["content"][0]["text"]
    body = await run_tool(d, token, sid, "r2", "capability_search", {"query": "time", "load": False})
    assert body["status"] == "ok" and body["structured_content"]["loaded"] == []
    assert (await inventory(d, token, sid))["loaded"] == []
    body = await run_tool(d, token, sid, "r3", "capability_search", {"query": "time"})
    assert body["structured_content"]["loaded"] == ["get_system_time"]
    body = await run_tool(d, token, sid, "r4", "get_system_time", {})
    assert body["status"] == "ok" and "unix_ms" in body["structured_content"]


async def test_the_inventory_reports_planes_counts_mapping_gaps_and_the_profile_with_sources(
        daemon_factory: DaemonFactory) -> None:
    mcp = {"command": sys.executable, "args": [SERVER, "--dotted"]}
    d = await daemon_factory(config={**FAUX, "mcpServers": {"s": mcp}, "tools": {
        "deferred": ["mcp__*"], "eager": ["mcp__s__echo"],
        "policy": {"run_command": {"approval": "warn", "paramRestrictions": {"timeout_ms": {"max": 60000}}},
                   "mcp__*": {"enabled": False}}}})
    token = await d.pair("catalog-client", strong=True)
    inv = await inventory(d, token)
    tools = {t["name"]: t for t in inv["tools"]}
    assert inv["session"] is None
    assert tools["capability_search"]["source"] == "native" and tools["capability_search"]["lifecycle"] == "current"
    assert tools["mcp__s__add"]["deferred"] and not tools["mcp__s__echo"]["deferred"]
    assert not tools["mcp__s__add"]["enabled"] and tools["read_file"]["enabled"]
    assert tools["ask_user"]["allowedCallers"] == ["main"] and tools["read_file"]["allowedCallers"] == ["main", "subagent"]
    assert tools["capability_search"]["inputExamples"][0] == {"query": "issue tracker"}
    assert {c["name"] for c in inv["catalog"]} == set(tools) == set(inv["runtimeRegistry"])
    assert all(c["schemaDigest"].startswith("sha256:") for c in inv["catalog"])
    # (disabled by the policy: neither offered, though eager, nor searchable, though deferred)
    assert "mcp__s__add" not in inv["searchable"] and "mcp__s__echo" not in inv["offered"]
    assert "mcp__s__echo" not in inv["defaultAllowed"]
    assert "read_file" in inv["defaultAllowed"] and "mcp__s__add" not in inv["defaultAllowed"]
    assert set(inv["extensionSurfaces"]["mcp"]) == {n for n, t in tools.items() if t["source"] == "mcp"}
    assert inv["extensionSurfaces"]["sources"]["mcp"] == len(inv["extensionSurfaces"]["mcp"])
    gaps = {g["name"]: g["alias"] for g in inv["mappingGaps"]}
    assert "mcp__s__some.tool" in gaps and gaps["mcp__s__some.tool"].startswith("mcp__s__some_tool_")
    assert "read_file" not in gaps
    v = inv["visibility"]
    assert v["catalog"] == len(tools) and v["deferred"] == sum(t["deferred"] for t in tools.values())
    assert v["searchable"] == len(inv["searchable"]) and v["offered"] == len(inv["offered"])
    assert v["subagents"] < v["main"] == len(tools) and v["disabled"] == len(inv["extensionSurfaces"]["mcp"])
    profile = inv["executionProfile"]["run_command"]
    assert profile["approval"] == {"value": "warn", "source": "config"}
    assert profile["enabled"] == {"value": True, "source": "default"}
    assert profile["paramRestrictions"] == {"value": {"timeout_ms": {"max": 60000.0}}, "source": "config"}
    assert profile["workspaceAllowlist"] == {"value": None, "source": "default"}
    assert inv["mcpServers"][0]["name"] == "s"


async def test_a_session_tool_policy_overrides_the_config_for_that_session_durably(
        daemon_factory: DaemonFactory) -> None:
    config = {**FAUX, "tools": {"policy": {"sleep_milliseconds": {"approval": "warn",
                                                                  "paramRestrictions": {"milliseconds": {"max": 5}}}}}}
    d = await daemon_factory(config=config)
    token = await d.pair("catalog-client", strong=True)
    project = (await d.project(token))["id"]
    sid = (await d.session(token, project))["id"]
    other = (await d.session(token, project))["id"]

    body = await run_tool(d, token, sid, "r1", "sleep_milliseconds", {"milliseconds": 5})
    assert body["status"] == "ok" and "policy warning" in body["content"][-1]["text"]  # approval: warn
    body = await run_tool(d, token, sid, "r2", "sleep_milliseconds", {"milliseconds": 6})
    assert body["error_code"] == "PARAM_NOT_ALLOWED" and "at most 5" in body["content"][0]["text"]

    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        "sleep_milliseconds": {"approval": "none"}, "get_system_time": {"enabled": False}}})
    assert r.status_code == 200, r.text
    configured = sum(e["kind"] == "session.configured" for e in await d.events(token, sid))
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        "get_system_time": {"enabled": False}}})  # (already so: nothing recorded)
    assert r.status_code == 200 and configured == sum(e["kind"] == "session.configured" for e in await d.events(token, sid))
    body = await run_tool(d, token, sid, "r3", "sleep_milliseconds", {"milliseconds": 1})
    assert body["status"] == "ok" and len(body["content"]) == 1  # no warning now
    body = await run_tool(d, token, sid, "r4", "get_system_time", {})
    assert body["error_code"] == "TOOL_DISABLED"
    body = await run_tool(d, token, other, "r5", "get_system_time", {})  # another session: the config's
    assert body["status"] == "ok"
    profile = (await inventory(d, token, sid))["executionProfile"]
    assert profile["sleep_milliseconds"]["approval"] == {"value": "none", "source": "session"}
    assert profile["sleep_milliseconds"]["paramRestrictions"]["source"] == "config"
    assert profile["get_system_time"]["enabled"] == {"value": False, "source": "session"}
    assert (await inventory(d, token, other))["executionProfile"]["get_system_time"]["enabled"]["source"] == "default"

    # per tool: an entry replaces that tool's override, null removes it; bad maps are refused
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"sleep_milliseconds": None}})
    assert r.status_code == 200, r.text
    for bad in [{"x": {"enabled": "no"}}, {"x": {"workspaceAllowlist": ["/etc"]}}, {"x": {"surprise": 1}},
                {"x": {"paramRestrictions": {"a": {"min": 2, "max": 1}}}}]:
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": bad})
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (bad, r.text)

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    inv = await inventory(d2, token, sid)
    assert inv["sessionToolPolicy"] == {"get_system_time": {"enabled": False}}
    assert inv["executionProfile"]["sleep_milliseconds"]["approval"] == {"value": "warn", "source": "config"}
    body = await run_tool(d2, token, sid, "r6", "get_system_time", {})
    assert body["error_code"] == "TOOL_DISABLED"


async def test_lens_serve_refuses_a_bad_tools_config_at_start(tmp_path: Path) -> None:
    (tmp_path / "c.jsonc").write_text('{"tools": {"policy": {"run_command": {"workspaceAllowlist": ["../x"]}}}}')
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "lens: CONFIG_INVALID: " in out.stderr and "tools.policy.run_command.workspaceAllowlist" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]


async def test_loads_belong_to_the_agent_and_a_subagent_naming_a_deferred_tool_has_it(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "tools": {"deferred": ["get_system_time"]}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    async def sub(request_id: str, prompt: str, tools: list[str] | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"prompt": prompt, **({"tools": tools} if tools is not None else {})}
        await run_tool(d, token, sid, request_id, "subagent", args)
        events = await d.events(token, sid)
        sub_id = [e for e in events if e["kind"] == "agent.started"][-1]["agent_id"]
        return [e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] == sub_id][-1]

    body = await sub("r1", '/tool capability_search {"query": "time"}')
    assert body["structured_content"]["loaded"] == ["get_system_time"]
    loaded = [e for e in await d.events(token, sid) if e["kind"] == "capability.loaded"]
    assert len(loaded) == 1 and loaded[0]["agent_id"].startswith("sub_")
    assert (await inventory(d, token, sid))["loaded"] == []  # the main agent loaded nothing
    body = await sub("r2", "/tool get_system_time {}")  # another subagent: not loaded for it
    assert body["error_code"] == "TOOL_NOT_LOADED"
    body = await sub("r3", "/tool get_system_time {}", tools=["get_system_time"])
    assert body["status"] == "ok"
    body = await run_tool(d, token, sid, "r4", "get_system_time", {})
    assert body["error_code"] == "TOOL_NOT_LOADED"


async def test_patches_cannot_take_a_session_tool_policy_past_1000_entries(daemon_factory: DaemonFactory) -> None:
    # Each patch was checked alone: two of 1000 entries built a map of 2001, which the planes then
    # refused to read, so the session's restrictions (here: a disabled tool) silently stopped.
    d = await daemon_factory(config=FAUX)
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"get_system_time": {"enabled": False}}})
    assert r.status_code == 200, r.text
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        f"x{i}": {"approval": "warn"} for i in range(999)}})
    assert r.status_code == 200, r.text  # (1000 entries: at the limit)
    configured = sum(e["kind"] == "session.configured" for e in await d.events(token, sid))
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"y": {"approval": "warn"}},
                                                                       "thinkingLevel": "high"})
    assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", r.text
    assert "1001 entries" in r.json()["error"]["message"]
    assert configured == sum(e["kind"] == "session.configured" for e in await d.events(token, sid))  # (nothing of it)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"x0": None, "y": {"approval": "warn"}}})
    assert r.status_code == 200, r.text  # (one removed, one added: still 1000)
    inv = await inventory(d, token, sid)
    assert len(inv["sessionToolPolicy"]) == 1000
    assert inv["executionProfile"]["get_system_time"]["enabled"] == {"value": False, "source": "session"}
    body = await run_tool(d, token, sid, "r1", "get_system_time", {})
    assert body["error_code"] == "TOOL_DISABLED"


async def test_a_backslashed_path_does_not_pass_the_workspace_allowlist(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "tools": {"policy": {"edit_file": {"workspaceAllowlist": ["src"]}}}})
    token = await d.pair("catalog-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "src").mkdir()
    sid = (await d.session(token, project["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "edit_file", {"path": "x\\..\\src\\f.txt", "mode": "create", "content": "hi"})
    assert body["error_code"] == "PATH_NOT_ALLOWED", body
    assert sorted(p.name for p in ws.iterdir()) == ["src"]  # (the executor would have made "x\..\src\f.txt" here)
    body = await run_tool(d, token, sid, "r2", "edit_file", {"path": "src/f.txt", "mode": "create", "content": "hi"})
    assert body["status"] == "ok" and (ws / "src" / "f.txt").read_text() == "hi"


async def test_the_allowlist_judges_where_a_symlink_leads(daemon_factory: DaemonFactory) -> None:
    # A symlink inside an allowed directory that leads elsewhere in the workspace passed the
    # allowlist, which read the path's text: the call wrote outside what the allowlist allows.
    d = await daemon_factory(config={**FAUX, "tools": {"policy": {"*": {"workspaceAllowlist": ["src"]}}}})
    token = await d.pair("catalog-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "src").mkdir()
    (ws / "other").mkdir()
    (ws / "other" / "notes.txt").write_text("outside the allowlist\n")
    os.symlink("../other", ws / "src" / "link")
    os.symlink("../other/notes.txt", ws / "src" / "notes.txt")
    sid = (await d.session(token, project["id"]))["id"]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("edit_file", {"path": "src/link/new.txt", "mode": "create", "content": "x"}),
        ("edit_file", {"path": "src/link/deeper/new.txt", "mode": "create", "content": "x"}),
        ("edit_file", {"path": "src/notes.txt", "mode": "rewrite", "content": "changed"}),
        ("patch_file", {"path": "src/notes.txt", "patch": "@@\n-outside the allowlist\n+changed\n"}),
        ("read_file", {"path": "src/link/notes.txt"}),
        ("read_file", {"path": "src/link"}),
        ("run_command", {"command": "touch made-here", "cwd": "src/link"}),
        ("job", {"action": "start", "command": "touch made-here", "cwd": "src/link"}),
    ]
    for n, (name, args) in enumerate(calls):
        body = await run_tool(d, token, sid, f"r{n}", name, args)
        assert body["error_code"] == "PATH_NOT_ALLOWED", (name, args, body)
        assert "other" in body["content"][0]["text"], body  # (it says where the path leads)
    assert sorted(p.name for p in (ws / "other").iterdir()) == ["notes.txt"]
    assert (ws / "other" / "notes.txt").read_text() == "outside the allowlist\n"
    # A link that stays inside the allowlist is followed as before.
    os.symlink("link/../src", ws / "src" / "self")  # (physically: other/.. is the root)
    body = await run_tool(d, token, sid, "ok1", "edit_file", {"path": "src/self/f.txt", "mode": "create", "content": "hi"})
    assert body["status"] == "ok", body
    assert (ws / "src" / "f.txt").read_text() == "hi"
    body = await run_tool(d, token, sid, "ok2", "read_file", {"path": "src/f.txt"})
    assert body["status"] == "ok", body


async def test_revert_call_judges_where_its_paths_lead_now(daemon_factory: DaemonFactory) -> None:
    # revert_call restored the paths of earlier edits unjudged: an edited file (or its directory)
    # replaced since by a symlink leading out of the allowlist was followed, and the file outside
    # put back to the edit's "before" bytes (or removed).
    d = await daemon_factory(config={**FAUX, "tools": {"policy": {"*": {"workspaceAllowlist": ["src"]}}}})
    token = await d.pair("catalog-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "src" / "sub").mkdir(parents=True)
    (ws / "other").mkdir()
    (ws / "src" / "notes.txt").write_text("original\n")
    sid = (await d.session(token, project["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "edit_file", {"path": "src/notes.txt", "mode": "rewrite", "content": "changed\n"})
    assert body["status"] == "ok", body
    rewrite_id = body["call_id"]
    body = await run_tool(d, token, sid, "r2", "edit_file", {"path": "src/sub/new.txt", "mode": "create", "content": "new\n"})
    assert body["status"] == "ok", body
    create_id = body["call_id"]
    # Since then: the file, and the directory, moved out of the allowlist, a link left in their place.
    (ws / "src" / "notes.txt").rename(ws / "other" / "notes.txt")
    os.symlink("../other/notes.txt", ws / "src" / "notes.txt")
    (ws / "src" / "sub").rename(ws / "other" / "sub")
    os.symlink("../other/sub", ws / "src" / "sub")
    for n, call_id in enumerate((rewrite_id, create_id)):
        body = await run_tool(d, token, sid, f"v{n}", "revert_call", {"call_id": call_id})
        assert body["error_code"] == "PATH_NOT_ALLOWED", body
        assert "other" in body["content"][0]["text"], body
    assert (ws / "other" / "notes.txt").read_text() == "changed\n"
    assert (ws / "other" / "sub" / "new.txt").read_text() == "new\n"
    # Links back into the allowlist: reverted as before.
    (ws / "src" / "notes.txt").unlink()
    (ws / "other" / "notes.txt").rename(ws / "src" / "real.txt")
    os.symlink("real.txt", ws / "src" / "notes.txt")
    body = await run_tool(d, token, sid, "v2", "revert_call", {"call_id": rewrite_id})
    assert body["status"] == "ok", body
    assert (ws / "src" / "real.txt").read_text() == "original\n"


async def test_a_revert_is_judged_by_the_allowlist_of_the_tool_that_made_the_edit(daemon_factory: DaemonFactory) -> None:
    # revert_call followed its own policy entry only: an allowlist on edit_file alone left the
    # revert of an edit_file edit unjudged, and a link put in the edited file's place since sent
    # the restore outside the allowlist.
    d = await daemon_factory(config={**FAUX, "tools": {"policy": {"edit_file": {"workspaceAllowlist": ["src"]}}}})
    token = await d.pair("catalog-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "src").mkdir()
    (ws / "other").mkdir()
    (ws / "src" / "notes.txt").write_text("original\n")
    (ws / "docs.txt").write_text("one\n")
    sid = (await d.session(token, project["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "edit_file", {"path": "src/notes.txt", "mode": "rewrite", "content": "changed\n"})
    assert body["status"] == "ok", body
    edit_id = body["call_id"]
    body = await run_tool(d, token, sid, "r2", "patch_file", {"path": "docs.txt", "patch": "@@\n-one\n+two\n"})
    assert body["status"] == "ok", body
    patch_id = body["call_id"]
    (ws / "src" / "notes.txt").rename(ws / "other" / "notes.txt")
    os.symlink("../other/notes.txt", ws / "src" / "notes.txt")
    body = await run_tool(d, token, sid, "v1", "revert_call", {"call_id": edit_id})
    assert body["error_code"] == "PATH_NOT_ALLOWED", body
    assert "allowlist of edit_file" in body["content"][0]["text"], body
    assert (ws / "other" / "notes.txt").read_text() == "changed\n"
    # patch_file has no allowlist: its edit outside src is reverted (edit_file's does not apply).
    body = await run_tool(d, token, sid, "v2", "revert_call", {"call_id": patch_id})
    assert body["status"] == "ok", body
    assert (ws / "docs.txt").read_text() == "one\n"
    edited = [e["body"] for e in await d.events(token, sid) if e["kind"] == "file.edited"]
    assert [e["tool"] for e in edited] == ["edit_file", "patch_file"]
    # The link led back into the allowlist: reverted as before.
    (ws / "src" / "notes.txt").unlink()
    (ws / "other" / "notes.txt").rename(ws / "src" / "real.txt")
    os.symlink("real.txt", ws / "src" / "notes.txt")
    body = await run_tool(d, token, sid, "v3", "revert_call", {"call_id": edit_id})
    assert body["status"] == "ok", body
    assert (ws / "src" / "real.txt").read_text() == "original\n"


async def test_an_allowlist_leaves_job_list_read_and_stop_callable(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={**FAUX, "tools": {"policy": {"*": {"workspaceAllowlist": ["src"]}}}})
    token = await d.pair("catalog-client", strong=True)
    project = await d.project(token)
    (Path(project["workspace"]) / "src").mkdir()
    sid = (await d.session(token, project["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "job", {"action": "list"})
    assert body["status"] == "ok", body
    body = await run_tool(d, token, sid, "r2", "job", {"action": "start", "command": "true"})
    assert body["error_code"] == "PATH_NOT_ALLOWED" and "cwd '.'" in body["content"][0]["text"]
    body = await run_tool(d, token, sid, "r3", "run_command", {"command": "pwd"})
    assert body["error_code"] == "PATH_NOT_ALLOWED"
    body = await run_tool(d, token, sid, "r4", "run_command", {"command": "pwd", "cwd": "src"})
    assert body["status"] == "ok", body


async def test_an_enum_value_the_log_cannot_hold_is_refused_not_a_crash(daemon_factory: DaemonFactory) -> None:
    # An integer past 64 bits in a session's enum restriction failed the session.configured append:
    # 503 SESSION_UNAVAILABLE, the actor restarted, and a third try quarantined the session.
    d = await daemon_factory(config=FAUX)
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    big = '{"toolPolicy": {"x": {"paramRestrictions": {"a": {"enum": [1, 123456789012345678901234567890]}}}}}'
    for _ in range(3):
        r = await d.client.patch(f"/api/v1/sessions/{sid}", content=big,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", r.text
        assert "toolPolicy.x.paramRestrictions.a.enum: the values contain an integer outside 64 bits" in r.text
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        "x": {"paramRestrictions": {"a": {"enum": [1, 2**63 - 1, -(2**63)]}}}}})
    assert r.status_code == 200, r.text  # (at the edge of 64 bits)
    assert (await d.view(token, sid))["status"] == "idle"


async def test_capability_search_finds_mcp_tools_named_and_described_in_other_scripts(
        daemon_factory: DaemonFactory) -> None:
    # Words were ASCII runs only: "天气" or "погода" matched nothing, "café" only its "caf".
    d = await daemon_factory(config={**FAUX, "mcpServers": {"w": {"command": sys.executable, "args": [SERVER, "--i18n"]}},
                                     "tools": {"deferred": ["mcp__*"]}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "capability_search", {"query": "天气预报"})
    assert [m["name"] for m in body["structured_content"]["matches"]] == ["mcp__w__天气查询"]
    body = await run_tool(d, token, sid, "r2", "capability_search", {"query": "ПОГОДА в городе", "load": False})
    assert [(m["name"], m["score"]) for m in body["structured_content"]["matches"]] == [("mcp__w__погода", 3)]
    body = await run_tool(d, token, sid, "r3", "capability_search", {"query": "creme brulee"})
    assert [m["name"] for m in body["structured_content"]["matches"]] == ["mcp__w__carte"]
    # (one character is too short for bigrams: it finds the text holding it)
    body = await run_tool(d, token, sid, "r4", "capability_search", {"query": "天", "load": False})
    assert [(m["name"], m["score"]) for m in body["structured_content"]["matches"]] == [("mcp__w__天气查询", 2)]
    assert (await inventory(d, token, sid))["loaded"] == ["mcp__w__天气查询", "mcp__w__carte"]
    # Thai, Lao, Khmer and Burmese ("weather", a word inside a run): each run was one word.
    for i, (query, name) in enumerate([("อากาศ", "th_weather"), ("ອາກາດ", "lo_weather"),
                                       ("អាកាសធាតុ", "km_weather"), ("မိုးလေဝသ", "my_weather")]):
        body = await run_tool(d, token, sid, f"s{i}", "capability_search", {"query": query, "load": False})
        assert [m["name"] for m in body["structured_content"]["matches"]] == [f"mcp__w__{name}"], query


async def test_a_disabled_tool_is_not_offered_to_the_model_and_the_inventory_agrees(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # The request's tool list kept a tool the policy disabled: the model called it and was refused.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "models": [{"id": "chat-test"}]}],
        "defaultModel": "loop/chat-test",
        "tools": {"deferred": ["sleep_milliseconds"], "policy": {"get_system_time": {"enabled": False},
                                                                 "run_command": {"approval": "warn"}}}})
    token = await d.pair("catalog-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    loop.push(chat_stream(text="one"), chat_stream(text="two"))
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    first = offered(loop.bodies[0])
    assert "get_system_time" not in first and "run_command" in first and "capability_search" in first
    inv = await inventory(d, token, sid)
    assert set(inv["offered"]) == set(first) and inv["visibility"]["offered"] == len(first)
    assert inv["searchable"] == ["sleep_milliseconds"] and inv["defaultAllowed"] == inv["offered"]

    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {
        "get_system_time": {"enabled": True}, "sleep_milliseconds": {"enabled": False}}})
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r2", "again")
    await d.wait_idle(token, sid)
    second = offered(loop.bodies[1])  # (the session's overrides: one back, and nothing left to search)
    assert "get_system_time" in second and "capability_search" not in second and "sleep_milliseconds" not in second
    inv = await inventory(d, token, sid)
    assert set(inv["offered"]) == set(second) and inv["visibility"]["offered"] == len(second)
    assert inv["searchable"] == [] and inv["visibility"]["searchable"] == 0 and inv["visibility"]["disabled"] == 1
    assert "get_system_time" not in (await inventory(d, token))["offered"]  # (without the session: the config's)
