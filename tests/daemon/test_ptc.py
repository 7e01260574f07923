"""Programmatic tool runs in a running daemon (F-TOOL-3 with ``localPtc``): the native list a
model request carries, a program calling a loaded deferred tool and the workspace tools through
the real executor, its edits recorded under its own call (so ``revert_call`` undoes them all),
and the errors a program meets, each a result the model sees."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime.providers.names import alias_for
from tests.executor_hold import held_at

from ..mcp.conftest import SERVER
from ..providers.servers.base import ScriptedServer
from ..providers.servers.openai_chat import chat_stream
from .conftest import Daemon, DaemonFactory, run_tool, stop_daemon, wait_until

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}
PTC = "programmatic_tool_run"


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in body["messages"] if m["role"] == "tool"]


async def start(daemon_factory: DaemonFactory, config: dict[str, Any]) -> tuple[Daemon, str, str]:
    d = await daemon_factory(config=config)
    token = await d.pair("ptc-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    return d, token, sid


async def test_a_program_calls_a_loaded_deferred_tool_and_only_its_output_reaches_the_model(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    loop = ScriptedServer()
    url = await loop.start(nursery)
    program = "t = get_system_time()\nprint(sorted(t.keys()))\nprint('big' * 3 if t['unix_ms'] > 0 else 'no')"
    loop.push(chat_stream(calls=[("call_1", "capability_search", {"query": "current time", "limit": 1})]),
              chat_stream(calls=[("call_2", PTC, {"code": program})]),
              chat_stream(calls=[("call_3", "get_system_time", {})]),
              # (an id naming a call of call_2's program is renamed like a repeated id)
              chat_stream(calls=[("call_2.1", PTC, {"code": "print('again')"})]),
              chat_stream(text="done"))
    config = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                             "models": [{"id": "chat-test"}]}],
              "defaultModel": "loop/chat-test", "localPtc": {},
              "tools": {"deferred": ["get_system_time", "sleep_milliseconds"]}}
    d, token, sid = await start(daemon_factory, config)
    await d.submit(token, sid, "r1", "what time is it?")
    await d.wait_idle(token, sid)
    assert len(loop.bodies) == 5
    first, second = offered(loop.bodies[0]), offered(loop.bodies[1])
    for tools in (first, second):  # loading get_system_time does not make it native
        assert PTC in tools and "read_file" in tools and "get_system_time" not in tools
    assert "capability_search" in first
    # the program's printed lines are the result; the tool's own result is not in the context
    ptc_result = tool_messages(loop.bodies[2])[-1]
    assert "['local', 'unix_ms', 'utc']" in ptc_result and "bigbigbig" in ptc_result
    assert "unix_ms\":" not in ptc_result
    native = tool_messages(loop.bodies[3])[-1]
    assert "TOOL_NOT_NATIVE" in native and PTC in native
    finished = {e["body"]["call_id"]: e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"}
    # (a program's calls are not calls of the model)
    assert set(finished) == {"call_1", "call_2", "call_3", "call_2.1-2"}
    assert finished["call_2.1-2"]["content"][0]["text"] == "again\n"
    assert finished["call_2"]["status"] == "ok"
    assert finished["call_2"]["structured_content"]["calls"] == [
        {"call_id": "call_2.1", "name": "get_system_time", "ok": True}]
    assert finished["call_3"]["error_code"] == "TOOL_NOT_NATIVE"
    inv = (await d.get("/tools/inventory", token)).json()
    assert "get_system_time" in inv["ptc"]["fromProgram"] and PTC in inv["ptc"]["native"]
    assert inv["ptc"]["nativeCapabilities"] is None and "get_system_time" not in inv["ptc"]["native"]


async def test_native_capabilities_empty_offers_the_ptc_entry_only(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(chat_stream(text="hello"))
    config = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                             "models": [{"id": "chat-test"}]}],
              "defaultModel": "loop/chat-test", "localPtc": {"nativeCapabilities": []}}
    d, token, sid = await start(daemon_factory, config)
    await d.submit(token, sid, "r1", "hi")
    await d.wait_idle(token, sid)
    assert offered(loop.bodies[0]) == [PTC]
    inv = (await d.get("/tools/inventory", token)).json()
    assert inv["ptc"]["native"] == [PTC] and inv["ptc"]["nativeCapabilities"] == []
    assert "read_file" in inv["ptc"]["fromProgram"] and "ask_user" not in inv["ptc"]["fromProgram"]


async def test_a_programs_edits_are_recorded_under_its_call_and_revert_call_undoes_them_all(
        daemon_factory: DaemonFactory) -> None:
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    ws = d.root / "workspaces" / "p"
    program = ("edit_file(path='notes.txt', mode='create', content='one\\n')\n"
               "edit_file(path='notes.txt', mode='rewrite', content='two\\n')\n"
               "r = read_file(path='notes.txt')\n"
               "print(r['content'].strip())")
    body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["status"] == "ok", body
    assert body["content"][0]["text"].startswith("two")
    assert (ws / "notes.txt").read_text() == "two\n"
    root = body["call_id"]
    edits = [e["body"] for e in await d.events(token, sid) if e["kind"] == "file.edited"]
    assert [e["call_id"] for e in edits] == [root, root] and [e["path"] for e in edits] == ["notes.txt"] * 2
    assert [c["name"] for c in body["structured_content"]["calls"]] == ["edit_file", "edit_file", "read_file"]
    reverted = await run_tool(d, token, sid, "r2", "revert_call", {"call_id": root})
    assert reverted["status"] == "ok", reverted
    assert not (ws / "notes.txt").exists()  # (both edits undone, last first: the file did not exist)


async def test_a_programs_edits_survive_an_abort_and_a_restart_mid_program(daemon_factory: DaemonFactory) -> None:
    # The edits of the calls that returned are recorded as they return, not with the program's
    # result: an abort (or a crash) before the program ends leaves them in the file history.
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    ws = d.root / "workspaces" / "p"
    program = ("edit_file(path='a.txt', mode='create', content='a\\n')\n"
               "edit_file(path='a.txt', mode='rewrite', content='b\\n')\n"
               "sleep_milliseconds(milliseconds=600000)\n"
               "edit_file(path='never.txt', mode='create', content='x')")
    await d.submit(token, sid, "r1", f"/tool {PTC} {json.dumps({'code': program})}")

    async def edited() -> list[dict[str, Any]] | None:
        found = [e for e in await d.events(token, sid) if e["kind"] == "file.edited"]
        return found if len(found) == 2 else None

    edits = await wait_until(edited, what="the program's two edits in the log while it runs")
    [started] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.started"]
    assert started["name"] == PTC
    assert {e["body"]["call_id"] for e in edits} == {started["call_id"]}
    assert not [e for e in await d.events(token, sid) if e["kind"] == "tool.finished"]  # (still running)
    assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200
    await d.wait_idle(token, sid)
    assert (ws / "a.txt").read_text() == "b\n" and not (ws / "never.txt").exists()

    await stop_daemon(d)
    d = await daemon_factory(config={**FAUX, "localPtc": {}}, root=d.root)
    changes = (await d.get(f"/sessions/{sid}/changes", token)).json()
    [listed] = changes["files"]  # (created, then rewritten)
    assert listed["path"] == "a.txt" and listed["status"] == "created"
    assert [(e["callId"], e["tool"]) for e in listed["edits"]] == [(started["call_id"], PTC)] * 2
    reverted = await run_tool(d, token, sid, "r2", "revert_call", {"call_id": started["call_id"]})
    assert reverted["status"] == "ok", reverted
    assert not (ws / "a.txt").exists()  # (both edits undone, last first)


async def test_a_programs_reverts_are_recorded_as_they_return_like_its_edits(daemon_factory: DaemonFactory) -> None:
    # A revert_call from a program changes the workspace as an edit does, so it is recorded when
    # it returns, not with the program's result. Recorded at the end, a program's revert of its own
    # call was placed after the edits it made later, which the log then called reverted (the
    # changed files said so, and revert_call of the program found nothing) while they were on
    # disk; and an abort after a revert lost it (the log kept the reverted call's edits).
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    ws = d.root / "workspaces" / "p"

    async def next_call_id() -> str:  # (the faux model's ids: call_<agent>_<answers so far>_<index>)
        answers = [e for e in await d.events(token, sid) if e["kind"] == "model.responded"]
        return f"call_main_{len(answers)}_0"

    me = await next_call_id()
    program = (f"edit_file(path='a.txt', mode='create', content='first')\n"
               f"revert_call(call_id='{me}')\n"
               f"edit_file(path='a.txt', mode='create', content='second')\n"
               f"edit_file(path='b.txt', mode='create', content='b')")
    body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["call_id"] == me and body["status"] == "ok", body
    assert (ws / "a.txt").read_text() == "second" and (ws / "b.txt").exists()
    changes = (await d.get(f"/sessions/{sid}/changes", token)).json()
    assert {f["path"]: f["status"] for f in changes["files"]} == {"a.txt": "created", "b.txt": "created"}
    reverted = await run_tool(d, token, sid, "r2", "revert_call", {"call_id": me})
    assert reverted["status"] == "ok", reverted  # (the edits made after its own revert)
    assert not (ws / "a.txt").exists() and not (ws / "b.txt").exists()

    earlier = (await run_tool(d, token, sid, "r3", "edit_file", {"path": "c.txt", "mode": "create",
                                                                  "content": "c"}))["call_id"]
    program = f"revert_call(call_id='{earlier}')\nsleep_milliseconds(milliseconds=600000)"
    await d.submit(token, sid, "r4", f"/tool {PTC} {json.dumps({'code': program})}")

    async def revert_recorded() -> bool:  # (while the program runs: it sleeps after the revert)
        return any(e["kind"] == "file.reverted" and e["body"]["reverted_call_id"] == earlier
                   for e in await d.events(token, sid))
    await wait_until(revert_recorded, what="the program's revert in the log while it runs")
    assert not (ws / "c.txt").exists()
    assert not [e for e in await d.events(token, sid) if e["kind"] == "tool.finished" and e["body"]["name"] == PTC
                and e["body"]["call_id"] != me]
    assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200
    await d.wait_idle(token, sid)
    changes = (await d.get(f"/sessions/{sid}/changes", token)).json()
    assert {f["path"]: f["status"] for f in changes["files"]}["c.txt"] == "reverted"
    again = await run_tool(d, token, sid, "r5", "revert_call", {"call_id": earlier})
    assert again["error_code"] == "NOTHING_TO_REVERT", again


async def test_what_a_program_gets_wrong_comes_back_as_an_error_result_with_what_it_printed(
        daemon_factory: DaemonFactory) -> None:
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})

    async def run(request_id: str, args: dict[str, Any]) -> dict[str, Any]:
        return await run_tool(d, token, sid, request_id, PTC, args)

    body = await run("r1", {"code": "print('x'\n"})
    assert body["is_error"] and body["error_code"] == "PTC_SYNTAX"
    body = await run("r2", {"code": "import os"})
    assert body["error_code"] == "PTC_NOT_ALLOWED" and "import" in body["content"][0]["text"]
    body = await run("r3", {"code": "print('before')\nread_file(path='missing.txt')\nprint('after')"})
    assert body["error_code"] == "PTC_TOOL_FAILED"
    text = body["content"][0]["text"]
    assert text.startswith("before") and "after" not in text and "read_file" in text
    assert body["structured_content"]["calls"][0]["ok"] is False
    body = await run("r4", {"code": "try:\n    ask_user(questions=[])\nexcept ToolError as e:\n    print(e.code)"})
    assert body["status"] == "ok" and body["content"][0]["text"].startswith("PTC_TOOL_NOT_ALLOWED")
    body = await run("r5", {"code": "edit_file(path='t.txt', mode='create', content='x')\nprint('edited')\n"
                                     "sleep_milliseconds(milliseconds=600000)", "timeout_ms": 5000})
    assert body["error_code"] == "PTC_TIMEOUT" and "timeout_ms 5000" in body["content"][0]["text"]
    assert body["content"][0]["text"].startswith("edited\n")  # (what it printed is kept)
    assert [c["name"] for c in body["structured_content"]["calls"]] == ["edit_file", "sleep_milliseconds"]
    edits = [e["body"] for e in await d.events(token, sid) if e["kind"] == "file.edited"]
    assert [(e["call_id"], e["path"]) for e in edits] == [(body["call_id"], "t.txt")]  # (kept on a timeout)
    body = await run("r6", {"code": "print(1)", "timeout_ms": 0})
    assert body["error_code"] == "INVALID_ARGUMENT"
    body = await run("r7", {"code": "x = 1", "extra": True})
    assert body["error_code"] == "INVALID_ARGUMENT" and "extra" in body["content"][0]["text"]
    # the session goes on: a later plain call runs
    body = await run_tool(d, token, sid, "r8", "get_system_time", {})
    assert body["status"] == "ok"


async def test_the_example_program_of_the_ptc_reference_runs_as_documented(daemon_factory: DaemonFactory) -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ptc.md").read_text()
    program = doc.split("```python\n", 1)[1].split("```", 1)[0]
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    src = d.root / "workspaces" / "p" / "src"
    src.mkdir()
    (src / "a.py").write_text("# TODO one\n# TODO two\n")
    (src / "b.py").write_text("# TODO three\n")
    (src / "c.py").write_text("print('done')\n")
    (src / "notes.txt").write_text("TODO not python\n")
    body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["status"] == "ok", body
    assert body["content"][0]["text"].splitlines() == ["   2 a.py", "   1 b.py"]
    assert [c["name"] for c in body["structured_content"]["calls"]] == ["read_file"] * 4


async def test_a_program_calling_a_tool_it_cannot_call_gets_a_typed_error_naming_the_tool_and_why(
        daemon_factory: DaemonFactory) -> None:
    # The refusal named the tool but not why ("cannot be called from a program; call it directly").
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    why = {"ask_user": "waits for a person's answer", "subagent": "runs another agent",
           "skill": "placed after the round's tool results", "job": "outlives the program", PTC: "do not nest"}
    calls = {"ask_user": "ask_user(questions=[{'question': 'which?', 'options': [{'id': 'a', 'label': 'A'}]}])",
             "subagent": "subagent(prompt='look around')", "skill": "skill(name='anything')",
             "job": "job(action='start', command='sleep 600')", PTC: f"{PTC}(code='print(1)')"}
    for i, (name, code) in enumerate(calls.items()):
        body = await run_tool(d, token, sid, f"r{i}", PTC, {"code": f"print('before')\n{code}\nprint('not reached')"})
        assert body["is_error"] and body["error_code"] == "PTC_TOOL_FAILED", body
        text = body["content"][0]["text"]
        assert text.startswith("before\n") and "not reached" not in text
        assert f"{name} failed: PTC_TOOL_NOT_ALLOWED: {name} cannot be called from a program: " in text, text
        assert why[name] in text and "call it directly" in text
        assert body["structured_content"]["calls"] == [{"call_id": f"{body['call_id']}.1", "name": name, "ok": False,
                                                         "error_code": "PTC_TOOL_NOT_ALLOWED"}]
    body = await run_tool(d, token, sid, "c", PTC, {"code": "try:\n    call_tool('job', {'action': 'list'})\n"
                                                           "except ToolError as e:\n    print(e.code, e.message)"})
    assert body["status"] == "ok" and body["content"][0]["text"].startswith("PTC_TOOL_NOT_ALLOWED job cannot be called")
    kinds = {e["kind"] for e in await d.events(token, sid)}
    assert not kinds & {"question.asked", "agent.started", "job.started", "skill.loaded"}  # (none of them ran)
    assert (await d.view(token, sid))["status"] == "idle"


async def test_a_programs_call_tool_of_a_tools_alias_calls_that_tool(daemon_factory: DaemonFactory) -> None:
    # The model is offered "mcp__srv__some.tool" as its alias, and a program naming it so was
    # answered TOOL_UNKNOWN; the call, recorded in the program's calls, named the alias.
    dotted = "mcp__srv__some.tool"
    alias = alias_for(dotted)
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {},
                                                 "mcpServers": {"srv": {"command": sys.executable,
                                                                        "args": [SERVER, "--dotted"]}}})
    body = await run_tool(d, token, sid, "r1", PTC, {"code": f"print(call_tool({alias!r}, {{}}))"})
    assert body["status"] == "ok" and "some.tool ran" in body["content"][0]["text"], body
    assert body["structured_content"]["calls"] == [{"call_id": f"{body['call_id']}.1", "name": dotted, "ok": True}]


async def test_a_subagents_program_calling_a_tool_it_cannot_call_by_name_gets_the_error_call_tool_gets(
        daemon_factory: DaemonFactory) -> None:
    # A subagent's program that named a main-only tool met it as an undefined name
    # (PTC_NAME_ERROR: name 'job' is not defined) where call_tool("job", ...) said TOOL_MAIN_ONLY.
    probes = {"job": "{'action': 'list'}", "todo": "{'items': []}", "get_system_time": "{}"}
    code = "".join(
        f"try:\n    {name}(**{args})\n    print('{name} ok')\nexcept ToolError as e:\n    print('{name}', e.code)\n"
        f"try:\n    call_tool('{name}', {args})\n    print('call_tool {name} ok')\n"
        f"except ToolError as e:\n    print('call_tool {name}', e.code)\n" for name, args in probes.items())
    code += "print('before')\nask_user(questions=[])\nprint('not reached')"
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "SUBPROGRAM", "toolCalls": [{"name": PTC, "arguments": {"code": code}}]},
        {"when": "kickoff", "toolCalls": [
            {"name": "subagent", "arguments": {"prompt": "SUBPROGRAM all tools"}},
            {"name": "subagent", "arguments": {"prompt": "SUBPROGRAM a few", "tools": [PTC, "read_file"]}}]},
    ]}], "defaultModel": "faux/faux-1", "localPtc": {}}
    d, token, sid = await start(daemon_factory, config)
    await d.submit(token, sid, "r1", "kickoff")
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    agents = {e["agent_id"]: e["body"]["tools"] for e in events if e["kind"] == "agent.started"}
    programs = {e["agent_id"]: e["body"] for e in events if e["kind"] == "tool.finished" and e["agent_id"] in agents}
    assert len(programs) == 2
    for agent_id, body in programs.items():
        # the main-only tools are refused as main-only (a subagent whose list leaves them out:
        # as unknown), by name as through call_tool; an uncaught one ends the program naming it
        main_only = "TOOL_UNKNOWN" if agents[agent_id] else "TOOL_MAIN_ONLY"
        other = "TOOL_UNKNOWN" if agents[agent_id] else None
        expected = [f"{how}{name} {code}" if code else f"{how}{name} ok"
                    for name, code in (("job", main_only), ("todo", main_only), ("get_system_time", other))
                    for how in ("", "call_tool ")]
        text = body["content"][0]["text"]
        assert text.splitlines()[:7] == [*expected, "before"], text
        assert body["error_code"] == "PTC_TOOL_FAILED" and "not reached" not in text
        assert f"ask_user failed: {main_only}: " in text and "PTC_NAME_ERROR" not in text
    kinds = {e["kind"] for e in events}
    assert not kinds & {"job.started", "todo.updated", "question.asked"}  # (none of them ran)


async def test_the_ptc_view_agrees_with_the_request_and_a_disabled_entry_leaves_the_plain_planes(
        daemon_factory: DaemonFactory, nursery: trio.Nursery) -> None:
    # The inventory's ptc view listed a tool the policy disables (natively, or from a program),
    # and with programmatic_tool_run itself disabled the deferred tools were reachable from
    # nowhere: capability_search loaded them, a native call was refused TOOL_NOT_NATIVE.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(chat_stream(text="one"),
              chat_stream(calls=[("call_1", "capability_search", {"query": "sleep", "limit": 1})]),
              chat_stream(calls=[("call_2", "sleep_milliseconds", {"milliseconds": 1})]),
              chat_stream(text="two"))
    config = {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                             "models": [{"id": "chat-test"}]}],
              "defaultModel": "loop/chat-test", "localPtc": {},
              "tools": {"deferred": ["sleep_milliseconds", "web_*"],
                        "policy": {"get_system_time": {"enabled": False}, "web_fetch": {"enabled": False}}}}
    d, token, sid = await start(daemon_factory, config)
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    first = offered(loop.bodies[0])
    assert PTC in first and "get_system_time" not in first and "sleep_milliseconds" not in first
    inv = (await d.get(f"/tools/inventory?session={sid}", token)).json()
    assert inv["ptc"]["native"] == sorted(first) == sorted(inv["offered"])
    assert "web_search" in inv["ptc"]["fromProgram"] and "sleep_milliseconds" in inv["ptc"]["fromProgram"]
    assert not {"get_system_time", "web_fetch"} & {*inv["ptc"]["native"], *inv["ptc"]["fromProgram"]}

    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {PTC: {"enabled": False}}})
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r2", "sleep a little")
    await d.wait_idle(token, sid)
    second, third = offered(loop.bodies[1]), offered(loop.bodies[2])
    assert PTC not in second and "capability_search" in second and "sleep_milliseconds" not in second
    assert "sleep_milliseconds" in third and PTC not in third  # (loaded: offered natively, as without PTC)
    done = {e["body"]["call_id"]: e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"}
    assert done["call_2"]["status"] == "ok", done["call_2"]
    inv = (await d.get(f"/tools/inventory?session={sid}", token)).json()
    assert inv["ptc"] is None and set(inv["offered"]) == set(offered(loop.bodies[3]))
    assert inv["searchable"] == ["web_search"] and inv["loaded"] == ["sleep_milliseconds"]


async def test_a_programs_call_that_ran_again_after_its_executor_died_says_so(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The program's edit_file is held by the executor once its file and journal record are
    # written (the test hold), and its child SIGKILLed there: the call runs once more on the next
    # child (the journal answers; the edit is applied once), and the program's record of its calls
    # says it ran again; a call that ran once has no such key.
    held = held_at(monkeypatch, tmp_path, "before_reply")
    d, token, sid = await start(daemon_factory, {**FAUX, "localPtc": {}})
    ws = d.root / "workspaces" / "p"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "f.txt").write_text("a\n")
    program = ("edit_file(path='f.txt', mode='edit', edits=[{'old_string': 'a', 'new_string': 'ab'}])\n"
               "print(read_file(path='f.txt')['content'].strip())")

    async def kill_when_held() -> None:
        with trio.fail_after(30):
            while not held.exists():
                await trio.sleep(0.01)
        os.kill(int(held.read_text()), signal.SIGKILL)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_when_held)
            body = await run_tool(d, token, sid, "r1", PTC, {"code": program})
    assert body["status"] == "ok", body
    assert body["content"][0]["text"].startswith("ab\n")
    assert (ws / "f.txt").read_text() == "ab\n"
    root = body["call_id"]
    assert body["structured_content"]["calls"] == [
        {"call_id": f"{root}.1", "name": "edit_file", "ok": True, "rerun_after": "EXECUTOR_UNAVAILABLE"},
        {"call_id": f"{root}.2", "name": "read_file", "ok": True}]
    assert body.get("rerun_after") is None  # (the program itself ran once)
