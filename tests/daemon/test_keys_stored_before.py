"""F-MOD-6 for what was stored before the daemon knew a key: every JSON answer built from the
log, and the Working Context sent to a provider.

``lens serve`` runs first without the keys in its environment: the faux provider's scripted
answer quotes one, its tool calls read a file and start a job that print it, and a todo holds it;
all of it is stored as written. The same data directory is served again with the keys set: no
answer (the session's view and list, its context, jobs, changes, a fork, the tool inventory,
history's search and pages, the events route) holds a key, nor does the request the session then
sends to another provider; the history index was rebuilt with the keys, so no search for a piece
of one finds an item. A value of 8 characters is a key; one of 7 is left as it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from events.secrets import MIN_SECRET, marker

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .conftest import Daemon, run_tool, serving, wait_until
from .keyleaks import KEYS, SLOW, leaks

STORED = ("ANTHROPIC_API_KEY", KEYS["ANTHROPIC_API_KEY"])  # the key of a provider the session never uses
EIGHT = ("LENS_TEST_EIGHT_KEY", "Qz8vK2pL")  # the shortest value scrubbed
SEVEN = ("LENS_TEST_SEVEN_KEY", "Wm4tR9x")  # one character short: never scrubbed
PADDING = "the padding line: "
# Searches for a key: a word of it, the words after it, a prefix, the whole key, the 8-character value.
KEY_PROBES = ["api03", STORED[1].rsplit("-", 1)[1], "W5eR8*", f'"{STORED[1]}"', EIGHT[1]]  # begins notes.txt, so that a page can end inside the key after it


def config(url: str) -> dict[str, Any]:
    key, eight, seven = STORED[1], EIGHT[1], SEVEN[1]
    return {
        "providers": [
            {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}], "script": [
                {"text": f"Your key is {key}, and {eight} and {seven}.", "reasoning": f"it said {key}",
                 "toolCalls": [{"name": "read_file", "arguments": {"path": "notes.txt"}},
                               {"name": "todo", "arguments": {"items": [{"id": "t1", "text": f"rotate {key}"}]}},
                               {"name": "job", "arguments": {"action": "start", "command": "cat notes.txt"}}]},
                {"text": "done"}]},
            {"id": "chat", "protocol": "openai-chat", "baseUrl": url + "/v1", "apiKeyEnv": "OPENAI_API_KEY",
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "anth", "protocol": "anthropic", "baseUrl": url, "apiKeyEnv": STORED[0], "models": [{"id": "m"}]},
            {"id": "short", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": SEVEN[0],
             "models": [{"id": "m"}]},
        ],
        "defaultModel": "faux/faux-1",
        "webSearch": {"apiKeyEnv": EIGHT[0]},
    }


async def test_answers_built_from_events_stored_before_their_key_was_known_do_not_show_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(EIGHT[1]) == MIN_SECRET and len(SEVEN[1]) == MIN_SECRET - 1
    keys = [STORED[1], EIGHT[1]]
    server = ScriptedServer()
    (tmp_path / "config").mkdir()
    for name in ("OPENAI_API_KEY", STORED[0], EIGHT[0], SEVEN[0]):
        monkeypatch.delenv(name, raising=False)
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(config(url)))
        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d):
            token = await d.pair("old-client", strong=True, via="cli")
            project = await d.project(token, "p")
            Path(project["workspace"], "notes.txt").write_text(f"{PADDING}{STORED[1]}\n{EIGHT[1]} {SEVEN[1]}\n")
            sid = (await d.session(token, project["id"]))["id"]
            # (a search for "remember" shows 24 words from it: the window ends inside the key)
            await d.submit(token, sid, "old-1", f"remember {' '.join(['this'] * 20)} {STORED[1]}")
            job = await finished_job(d, token, sid)
            await d.wait_idle(token, sid, timeout=SLOW)
            # Without the keys known, all of it is stored and shown as written, and found by its pieces.
            assert STORED[1] in (await d.get(f"/sessions/{sid}", token)).text
            for probe in KEY_PROBES:
                assert await searched(d, token, project, probe), probe
            assert await serve.terminate() == 0

        monkeypatch.setenv("OPENAI_API_KEY", KEYS["OPENAI_API_KEY"])
        for name, value in (STORED, EIGHT, SEVEN):
            monkeypatch.setenv(name, value)
        async with serving(tmp_path, stderr_name="serve-2.err") as (serve, d):
            answers = await answers_of(d, token, project, sid, job)
            found = [leak for where, data in answers for leak in leaks(where, data, keys)]
            assert not found, "\n".join(found)
            view = next(data for where, data in answers if where.endswith(f"/sessions/{sid}")).decode()
            for name in (STORED[0], EIGHT[0]):
                assert marker(name) in view, name
            assert SEVEN[1] in view and marker(SEVEN[0]) not in view, view
            # The history index was rebuilt with the keys: no piece of one finds an item, key-free
            # words of the same items do (answers_of), and so does the 7-character value.
            for probe in KEY_PROBES:
                assert await searched(d, token, project, probe) == [], probe
            assert await searched(d, token, project, SEVEN[1])
            # The tool reads the same index (the call's own input, which quotes the query, aside).
            for query, hits in (("api03", False), ("remember", True)):
                before = max(e["seq"] for e in await d.events(token, sid))
                body = await run_tool(d, token, sid, f"tool-{query}", "history_search", {"query": query})
                assert not body["is_error"], body
                older = [r for r in body["structured_content"]["results"] if r["seq"] <= before]
                assert bool(older) is hits, body
            await history_pages(d, token, project)

            # The session moves to another provider: the context it sends holds no key it stored.
            r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "chat/m"})
            assert r.status_code == 200, r.text
            server.push(oc.chat_stream(text="noted"))
            await d.submit(token, sid, "new-1", "and now?")
            await d.wait_idle(token, sid, timeout=SLOW)
            sent = json.dumps(server.requests[-1].body)
            assert not leaks("the request to chat", sent, keys), sent
            assert marker(STORED[0]) in sent and marker(EIGHT[0]) in sent and SEVEN[1] in sent, sent
            assert await serve.terminate() == 0
        nursery.cancel_scope.cancel()


async def finished_job(d: Daemon, token: str, sid: str) -> str:
    async def finished() -> dict[str, Any] | None:
        jobs = (await d.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]
        return jobs[0] if jobs and jobs[0]["status"] != "running" else None

    return (await wait_until(finished, SLOW, "the job's end"))["jobId"]


async def answers_of(d: Daemon, token: str, project: dict[str, Any], sid: str, job: str) -> list[tuple[str, bytes]]:
    """Every answer of the routes that show what the session stored, as (request, body)."""
    reader = await d.pair("new-client")
    answers: list[tuple[str, bytes]] = []

    async def keep(r: httpx2.Response) -> dict[str, Any]:
        assert r.status_code < 300, (r.request.url, r.text)
        answers.append((f"{r.request.method} {r.request.url.path}", r.content))
        return r.json()

    view = await keep(await d.get(f"/sessions/{sid}", reader))
    assert view["todos"], view
    await keep(await d.get("/sessions", reader, params={"project": project["id"]}))
    await keep(await d.get(f"/sessions/{sid}/context", reader))
    await keep(await d.get(f"/sessions/{sid}/events", reader))
    await keep(await d.get(f"/sessions/{sid}/jobs", reader))
    out = await keep(await d.get(f"/sessions/{sid}/jobs/{job}", reader))
    assert marker(STORED[0]) in out["output"], out
    await keep(await d.get(f"/sessions/{sid}/changes", reader))
    await keep(await d.get("/tools/inventory", reader, params={"session": sid}))
    for query in ("key", "remember", "rotate", "padding"):
        hits = await keep(await d.post("/history/search", reader, {"projectId": project["id"], "query": query}))
        assert hits["results"], query
        for hit in hits["results"]:
            await keep(await d.get(f"/history/items/{hit['contextItemId']}", reader))
    seq = max(e["seq"] for e in await d.events(token, sid))
    fork = await keep(await d.post(f"/sessions/{sid}/fork", token, {"seq": seq}))
    await keep(await d.get(f"/sessions/{fork['id']}", reader))
    return answers


async def searched(d: Daemon, token: str, project: dict[str, Any], query: str) -> list[str]:
    """The ids of the items the history route finds for ``query``."""
    r = await d.post("/history/search", token, {"projectId": project["id"], "query": query, "limit": 100})
    assert r.status_code == 200, r.text
    return [hit["contextItemId"] for hit in r.json()["results"]]


async def history_pages(d: Daemon, token: str, project: dict[str, Any]) -> None:
    """The file's text read back from history in pages: the index holds it with the markers
    (rebuilt with the keys known), so offsets, size and digest are those of that text, the same
    on every page, and a page may end inside a marker."""
    hits = (await d.post("/history/search", token, {"projectId": project["id"], "query": "padding"})).json()
    pages = [(await d.get(f"/history/items/{h['contextItemId']}", token)).json() for h in hits["results"]]
    whole = next(p for p in pages if p["role"] == "tool_result" and PADDING in p["text"])
    item = whole["contextItemId"]
    at = whole["text"].index(PADDING) + len(PADDING)
    start = len(whole["text"][:at - len(PADDING)].encode())
    first = (await d.get(f"/history/items/{item}", token, params={"offset": start, "limit": len(PADDING) + 10})).json()
    mark = marker(STORED[0])
    assert (first["text"], first["nextOffset"], first["eof"]) == (PADDING + mark[:10], start + len(PADDING) + 10,
                                                                   False), first
    rest = (await d.get(f"/history/items/{item}", token, params={"offset": first["nextOffset"]})).json()
    assert rest["text"].startswith(mark[10:]) and rest["eof"], rest
    assert first["size"] == rest["size"] == whole["size"] and first["digest"] == rest["digest"] == whole["digest"]
    # (the size and digest are those of the text the index holds: with the markers)
    text = whole["text"].encode()
    assert (whole["size"], whole["digest"]) == (len(text), hashlib.sha256(text).hexdigest()), whole
