"""F-HAR-1, F-HAR-2 and F-EXE-7 over HTTP, a fourth pass as a client author drives a real daemon
(loopback port 0, the ``faux`` provider calling tools, the real executor over gRPC).

What the earlier passes pin is not redone. Here: an optional argument of ``run_command``,
``job``, ``todo``, ``ask_user``, ``web_search``, ``web_fetch``, ``programmatic_tool_run``,
``capability_search``, ``skill`` and ``history_search`` sent as ``null`` is that argument left
out, as ``read_file``, ``edit_file``, ``subagent`` and ``history_search``'s text arguments already
read it (a model that fills every property of a tool's schema sends ``null`` for those it does not
use)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from ..web.conftest import web_server  # noqa: F401 (fixture: a loopback HTTP server)
from ..web.server import Request, WebServer, response
from .conftest import Daemon, DaemonFactory, question_opened, run_tool, wait_until


async def _ok(d: Daemon, token: str, sid: str, rid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    body = await run_tool(d, token, sid, rid, name, args)
    assert body["is_error"] is False, (name, args, body)
    return body


async def test_an_optional_argument_sent_as_null_is_that_argument_left_out(daemon: Daemon, strong: str):
    # Before: run_command and job refused "timeout_ms must be an integer …, got null" and "cwd
    # must be a workspace-relative path", job list/read/stop refused the unused properties as
    # arguments they do not take, todo "Expected `str`, got `null` - at `$[0].status`", and
    # ask_user the same for options and allow_text.
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    unused = {"command": None, "timeout_ms": None, "cwd": None, "job_id": None, "offset": None, "max_bytes": None}
    ran = await _ok(daemon, strong, sid, "r1", "run_command",
                    {"command": "pwd", "timeout_ms": None, "max_output_bytes": None, "cwd": None})
    assert ran["content"][0]["text"] == f"{project['workspace']}\n\n[exit 0]", ran
    started = await _ok(daemon, strong, sid, "r2", "job",
                        {**unused, "action": "start", "command": "echo from the job"})
    job_id = started["structured_content"]["job_id"]

    async def ended() -> bool:
        r = await daemon.get(f"/sessions/{sid}/jobs/{job_id}", strong)
        return r.json()["status"] == "exited"

    await wait_until(ended, what="the job's end")
    await daemon.wait_idle(strong, sid)
    listed = await _ok(daemon, strong, sid, "r3", "job", {**unused, "action": "list"})
    assert [j["job_id"] for j in listed["structured_content"]["jobs"]] == [job_id]
    read = await _ok(daemon, strong, sid, "r4", "job", {**unused, "action": "read", "job_id": job_id})
    assert read["content"][0]["text"].startswith("from the job\n"), read
    stopped = await run_tool(daemon, strong, sid, "r5", "job", {**unused, "action": "stop", "job_id": job_id})
    assert stopped["error_code"] == "JOB_FINISHED", stopped  # (its own refusal, not the arguments')
    needs = await run_tool(daemon, strong, sid, "r6", "job", {**unused, "action": "read"})
    assert needs["error_code"] == "INVALID_ARGUMENT" and "job read needs job_id" in needs["content"][0]["text"], needs
    # a name the schema lacks is refused though null, as run_command refuses it (job dropped it)
    for i, (args, named) in enumerate((({"action": "list", "bogus": None}, "'bogus'"),
                                       ({"action": "start", "command": "true", "timout_ms": None}, "'timout_ms'"))):
        odd = await run_tool(daemon, strong, sid, f"r6{i}", "job", args)
        assert odd["error_code"] == "INVALID_ARGUMENT" and f"does not take {named}" in odd["content"][0]["text"], odd
    odd = await run_tool(daemon, strong, sid, "r6r", "run_command", {"command": "true", "timout_ms": None})
    assert odd["error_code"] == "INVALID_ARGUMENT" and "timout_ms" in odd["content"][0]["text"], odd
    await _ok(daemon, strong, sid, "r7", "todo", {"items": [{"id": "a", "text": "A", "status": None}]})
    assert (await daemon.view(strong, sid))["todos"] == [{"id": "a", "text": "A", "status": "pending"}]
    # a required field null is still refused, naming it
    refused = await run_tool(daemon, strong, sid, "r8", "todo", {"items": [{"id": "a", "text": None}]})
    assert refused["error_code"] == "INVALID_ARGUMENT" and "$[0].text" in refused["content"][0]["text"], refused
    ask = {"questions": [{"id": "q", "text": "Anything to add?", "options": None, "allow_text": None}]}
    qid = await question_opened(daemon, strong, sid, "r9", "/tool ask_user " + json.dumps(ask))
    view = await daemon.view(strong, sid)
    assert view["questions"][0]["questions"] == [{"id": "q", "text": "Anything to add?", "options": [],
                                                  "allow_text": True}], view["questions"]
    r = await daemon.post(f"/sessions/{sid}/questions/{qid}/answer", strong, {"kind": "answer", "text": "no"})
    assert r.status_code == 200, r.text
    await daemon.wait_idle(strong, sid)


async def test_an_optional_argument_of_the_web_tools_sent_as_null_is_that_argument_left_out(
        daemon_factory: DaemonFactory, web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: web_search refused "num_results must be an integer from 1 to 50, got null" (and
    # livecrawl, type, context_max_characters the same), web_fetch "format must be one of
    # markdown, text, html, got null" and "timeout must be a number of seconds …, got null".
    async def search(req: Request, stream: trio.SocketStream) -> None:
        results = [{"title": "Found", "url": "https://found.example/", "text": "about lens"}]
        await stream.send_all(response(200, json.dumps({"results": results}).encode(),
                                       [("Content-Type", "application/json")]))
    web_server.route("/search", search)
    monkeypatch.setenv("LENS_TEST_WEB_SEARCH_KEY", "k-123")
    d = await daemon_factory(config={"web": {"allowPrivateAddresses": True},
                                     "webSearch": {"baseUrl": web_server.base, "apiKeyEnv": "LENS_TEST_WEB_SEARCH_KEY"}})
    token = await d.pair("web-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    nulls = {"num_results": None, "livecrawl": None, "type": None, "context_max_characters": None}
    found = await _ok(d, token, sid, "w1", "web_search", {"query": "lens", **nulls})
    assert found["structured_content"]["results"][0]["url"] == "https://found.example/", found
    # the backend was asked with the defaults (F-TOOL-8)
    assert web_server.requests[0].json() == {"query": "lens", "numResults": 8, "type": "auto",
                                             "contents": {"text": {"maxCharacters": 10000}, "livecrawl": "fallback"}}
    url = web_server.reply("/page.html", "<h1>Lens</h1><p>Read it.</p>")
    fetched = await _ok(d, token, sid, "w2", "web_fetch", {"url": url, "format": None, "timeout": None})
    assert fetched["content"][0]["text"] == "# Lens\n\nRead it.", fetched  # (markdown, the default)
    # a required argument sent as null is still refused, naming it; so is a value of another type
    for rid, name, args, said in (
            ("w3", "web_search", {"query": None, **nulls}, "web_search needs 'query', a non-empty string, got null"),
            ("w4", "web_fetch", {"url": None, "format": None, "timeout": None}, "url must be a string, got null"),
            ("w5", "sleep_milliseconds", {"milliseconds": None},
             "milliseconds must be an integer from 0 to 2147483647, got null"),
            ("w6", "web_search", {"query": "lens", "num_results": "8"}, 'num_results must be an integer from 1 to 50, got "8"'),
            ("w7", "web_fetch", {"url": url, "format": 1}, "format must be one of markdown, text, html, got 1")):
        refused = await run_tool(d, token, sid, rid, name, args)
        assert refused["error_code"] == "INVALID_ARGUMENT" and refused["content"][0]["text"] == f"INVALID_ARGUMENT: {said}", refused
    assert len(web_server.requests) == 2  # (the refused calls asked nothing)


async def test_an_optional_argument_of_the_other_model_tools_sent_as_null_is_that_argument_left_out(
        daemon_factory: DaemonFactory) -> None:
    # Before: programmatic_tool_run refused "timeout_ms must be an integer from 1 to …",
    # capability_search "limit must be an integer from 1 to 20, got null" (and load), skill
    # "unload must be true or false, got null", history_search "limit must be an integer".
    daemon = await daemon_factory(config={"localPtc": {}})  # (programmatic_tool_run offered)
    strong = await daemon.pair("null-client", strong=True)
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    ran = await _ok(daemon, strong, sid, "o1", "programmatic_tool_run", {"code": "print(6 * 7)", "timeout_ms": None})
    assert ran["content"][0]["text"].startswith("42\n"), ran
    await _ok(daemon, strong, sid, "o2", "capability_search", {"query": "issue tracker", "limit": None, "load": None})
    await _ok(daemon, strong, sid, "o3", "skill", {"name": None, "unload": None})
    await _ok(daemon, strong, sid, "o4", "history_search", {"query": "print", "limit": None, "session_id": None})
    refused = await run_tool(daemon, strong, sid, "o5", "programmatic_tool_run", {"code": None, "timeout_ms": None})
    assert refused["error_code"] == "INVALID_ARGUMENT" and "takes {code, timeout_ms?}" in refused["content"][0]["text"]
    refused = await run_tool(daemon, strong, sid, "o6", "capability_search", {"query": None, "limit": None})
    assert refused["content"][0]["text"] == "INVALID_ARGUMENT: query must be a string, got null", refused
