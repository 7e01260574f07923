"""F-MOD-6 where a text is cut to a limit: a key placed across the cut must be replaced whole
(scrubbed before the cut), or, where the cut is made where no key is known (the executor, a ring
of bytes), its piece left out. A piece of a key cut first reaches no scrub that could recognise it.

Each test runs the suite's daemon (``daemon_factory``) with a key in its environment, the real
executor, real MCP servers over stdio, and looks for 8 characters of the key in what is shown:
the answers, the events, and (for the project file) the request a loopback provider received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from events.secrets import marker
from runtime.jobs import TAIL_BYTES
from runtime.prompt import MAX_PROJECT_FILE_CHARS
from tools.files.errors import READ_PAGE_BYTES
from tools.mcp.client import STDERR_TAIL_BYTES
from tools.mcp.servers import MAX_TOOL_NAME

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import Reply, ScriptedServer, sse
from .conftest import DaemonFactory, run_tool, stop_daemon, wait_until
from .keyleaks import KEYS, SLOW, leaks, loop_config, stream_caught_up, watch

NAME = "LENS_TEST_CUT_KEY"
KEY = KEYS["OPENAI_API_KEY"]
MARK = marker(NAME)
INTO = 10  # characters of the key inside each limit


def keyed_config(**extra: Any) -> dict[str, Any]:
    return {"providers": [{"id": "chat", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
                           "apiKeyEnv": NAME, "models": [{"id": "m"}]},
                          {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}],
            "defaultModel": "faux/faux-1", **extra}


async def test_mcp_texts_cut_at_their_limits_show_no_piece_of_a_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # serverInfo's title (200 characters) and a skipped tool's name (128) with the key across
    # the cut; a stderr tail (4096 bytes) that begins 10 characters before the key's end; a line
    # that is not JSON quoted in the error (200 characters) with the key across the cut.
    from ..mcp.conftest import SERVER

    monkeypatch.setenv(NAME, KEY)
    tail_starts_inside = f"import os, sys; sys.stderr.write(os.environ[{NAME!r}] + 'e' * {STDERR_TAIL_BYTES - INTO}); sys.exit(7)"
    garbled = f"import os, sys, time; print('x' * {200 - INTO} + os.environ[{NAME!r}], flush=True); time.sleep(30)"
    d = await daemon_factory(config=keyed_config(mcpServers={
        "k": {"command": sys.executable, "args": [SERVER, "--keyed", NAME], "envFrom": [NAME]},
        "tail": {"command": sys.executable, "args": ["-c", tail_starts_inside], "envFrom": [NAME], "maxRestarts": 0},
        "garbled": {"command": sys.executable, "args": ["-c", garbled], "envFrom": [NAME], "maxRestarts": 0}}))
    token = await d.pair("mcp-client", strong=False)

    async def settled() -> dict[str, Any] | None:
        r = await d.get("/tools/inventory", token)
        assert r.status_code == 200, r.text
        states = {s["name"]: s for s in r.json()["mcpServers"]}
        return states if all(s["status"] in ("running", "failed") for s in states.values()) else None

    states = await wait_until(settled, SLOW, "the MCP servers running or failed")
    raw = (await d.get("/tools/inventory", token)).content
    assert not leaks("the tool inventory", raw, [KEY]), raw.decode()[:2000]
    k = states["k"]
    assert k["status"] == "running", k
    # (a marker the limit would split is left out whole: the text is cut before it)
    assert k["serverInfo"]["title"] == "t" * 190, k["serverInfo"]
    (bad,) = [s["name"] for s in k["skippedTools"] if s["name"].startswith("bad name")]
    assert len(bad) == MAX_TOOL_NAME - INTO and bad.endswith("n") and "[redacted" not in bad, bad
    tail = states["tail"]
    assert tail["status"] == "failed" and tail["stderrTail"] == "e" * (STDERR_TAIL_BYTES - INTO), tail["stderrTail"][:40]
    garbled_state = states["garbled"]
    assert garbled_state["status"] == "failed" and "x" * 40 in garbled_state["error"], garbled_state


async def test_command_output_file_pages_and_job_output_cut_inside_a_key_show_no_piece_of_it(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=keyed_config())
    token = await d.pair("cut-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "short.txt").write_text("a" * 100 + KEY + "\n")
    (ws / "long.txt").write_text("l" * (READ_PAGE_BYTES - INTO) + KEY + "l" * 100)  # one line past a page
    (ws / "job.txt").write_text("j" * 50 + KEY + "b" * (TAIL_BYTES - INTO))
    sid = (await d.session(token, project["id"]))["id"]

    # The executor caps a command's output (knowing no key) 10 characters into the key.
    ran = await run_tool(d, token, sid, "cmd", "run_command", {"command": "cat short.txt", "max_output_bytes": 100 + INTO})
    text = json.dumps(ran)
    assert not leaks("run_command's result", text, [KEY]), text
    assert "a" * 100 + "\\n[exit 0, output truncated]" in text, text

    # read_file's page of a line longer than the page ends 10 characters into the key.
    page = await run_tool(d, token, sid, "read", "read_file", {"path": "long.txt"})
    text = json.dumps(page)
    assert not leaks("read_file's page", text, [KEY]), text[-600:]
    assert f"to continue, call read_file with offset {READ_PAGE_BYTES - INTO}]" in text, text[-600:]
    rest = json.dumps(await run_tool(d, token, sid, "read2", "read_file", {"path": "long.txt", "offset": READ_PAGE_BYTES - INTO}))
    assert MARK in rest and not leaks("read_file's next page", rest, [KEY]), rest[:600]

    # A job's recorded tail begins 10 characters before the key's end; the job tool's page
    # ends 10 characters into it.
    await run_tool(d, token, sid, "job", "job", {"action": "start", "command": "cat job.txt"})

    async def finished() -> dict[str, Any] | None:
        jobs = (await d.get(f"/sessions/{sid}/jobs", token)).json()["jobs"]
        return jobs[0] if jobs and jobs[0]["status"] != "running" else None

    job = await wait_until(finished, SLOW, "the job's end")
    await d.wait_idle(token, sid)
    read = await run_tool(d, token, sid, "jobread", "job", {"action": "read", "job_id": job["jobId"], "max_bytes": 50 + INTO})
    text = json.dumps(read)
    assert not leaks("the job tool's page", text, [KEY]), text
    assert "j" * 50 + "\\n[" in text and "to continue, read with offset 50]" in text, text
    routed = (await d.get(f"/sessions/{sid}/jobs/{job['jobId']}", token, params={"limit": 50 + INTO})).json()
    assert routed["output"] == "j" * 50 and routed["nextOffset"] == 50, routed

    events = await d.events(token, sid)
    (ended,) = [e for e in events if e["kind"] == "job.finished"]
    assert ended["body"]["output_tail"] == "b" * (TAIL_BYTES - INTO), ended["body"]["output_tail"][:40]
    # (recorded where its first byte is in the whole output: past the piece of the key left out)
    assert ended["body"]["output_tail_start"] == 50 + len(KEY), ended["body"]["output_tail_start"]
    everything = json.dumps(events)
    assert not leaks("the session's events", everything, [KEY]), everything[:400]


# A command that leaves a line of stdout unfinished, then one of stderr, then writes the key on
# stdout past the cap: each write waits until the executor has read the one before (its pipe
# empty, FIONREAD), so the chunks come in this order.
INTERLEAVED = """import fcntl, os, struct, sys, termios, time
def drained(fd):
    end = time.monotonic() + 30
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"0000"))[0] and time.monotonic() < end:
        time.sleep(0.001)
os.write(1, b"out "); drained(1)
os.write(2, b"err "); drained(2)
os.write(1, open("key.txt", "rb").read())
"""


async def test_command_output_cut_inside_a_key_shows_no_piece_of_it_when_another_streams_line_is_unfinished(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # run_command keeps each stream's lines whole, writing what no newline ended at the end: the
    # cut (in stdout's line) must still be where the result ends, or its piece of the key is
    # followed by stderr's unfinished line and is not left out.
    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=keyed_config())
    token = await d.pair("cut-client", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    (ws / "interleaved.py").write_text(INTERLEAVED)
    (ws / "key.txt").write_text(KEY + "\n")
    sid = (await d.session(token, project["id"]))["id"]
    ran = await run_tool(d, token, sid, "cmd", "run_command",
                         {"command": "python3 interleaved.py", "max_output_bytes": 8 + INTO})
    text = json.dumps(ran)
    assert not leaks("run_command's result", text, [KEY]), text
    assert ran["content"][0]["text"] == "err out \n[exit 0, output truncated]", text


async def test_a_project_file_cut_for_the_prompt_sends_no_piece_of_a_key(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    # <workspace>/AGENTS.md is cut at MAX_PROJECT_FILE_CHARS for the system prompt, 10
    # characters into the key; the provider's request holds no piece of it, and the key's marker
    # the cut would split is left out whole (as Secrets.cut does; it ended "[redacted L").
    monkeypatch.setenv(NAME, KEY)
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(oc.chat_stream(text="fine"))
    d = await daemon_factory(config=loop_config(url, NAME))
    token = await d.pair("prompt-client", strong=True)
    project = await d.project(token)
    Path(project["workspace"], "AGENTS.md").write_text("r" * (MAX_PROJECT_FILE_CHARS - INTO) + KEY + " and more rules")
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    view = await d.wait_idle(token, sid, timeout=SLOW)
    assert view["status"] == "idle", view
    sent = json.dumps(loop.bodies)
    assert not leaks("the request to the model", sent, [KEY]), sent[-2000:]
    assert "r" * 100 + "\\n[\\u2026 truncated" in sent or "r" * 100 + "\\n[… truncated" in sent, sent[-2000:]
    assert MARK[:INTO] not in sent, sent[-2000:]


async def test_a_program_cutting_a_tool_result_shows_no_piece_of_a_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A programmatic tool run gets its calls' results before any store scrubs them; what it
    # prints is cut (by the program here, by its output cap or a repr's 200 characters) before
    # the result is recorded.
    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=keyed_config(localPtc={}))
    token = await d.pair("ptc-client", strong=True)
    project = await d.project(token)
    Path(project["workspace"], "k.txt").write_text("a" * 100 + KEY + "\n")
    sid = (await d.session(token, project["id"]))["id"]
    program = "print(read_file(path='k.txt')['content'][:110])"
    ran = await run_tool(d, token, sid, "ptc", "programmatic_tool_run", {"code": program})
    text = json.dumps(ran)
    assert not leaks("the program's result", text, [KEY]), text
    assert "a" * 100 + MARK[:INTO] in text, text


async def test_a_key_split_between_deltas_streams_as_its_marker_and_a_stream_cut_inside_one_shows_no_piece(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    # The model streams the key in two deltas: the live stream shows its marker. Then an answer
    # whose connection drops 20 characters into the key: the answer fails, and the stream shows
    # no piece of it (what was held back at the cut is not sent).
    monkeypatch.setenv(NAME, KEY)
    loop = ScriptedServer()
    url = await loop.start(nursery)
    dropped = oc.chat_stream(text=["Your key is ", KEY[:20]]).events
    loop.push(oc.chat_stream(text=[f"Your key is {KEY[:INTO]}", f"{KEY[INTO:]}, keep it."]),
              Reply(chunks=sse(dropped[:3]), close_early=True))
    d = await daemon_factory(config=loop_config(url, NAME))
    token = await d.pair("delta-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    stream = bytearray()
    async with trio.open_nursery() as inner:
        inner.start_soon(watch, d, token, stream)
        await d.submit(token, sid, "r1", "what is my key?")
        assert (await d.wait_idle(token, sid, timeout=SLOW))["status"] == "idle"
        await d.submit(token, sid, "r2", "again")
        assert (await d.wait_idle(token, sid, timeout=SLOW))["status"] == "idle"
        await stream_caught_up(d, stream)
        inner.cancel_scope.cancel()
    shown = stream.decode()
    frames = [block.split("\ndata: ", 1) for block in shown.split("\n\n") if "event: model.delta" in block]
    deltas = "".join(json.loads(data).get("text", "") for _, data in frames)
    assert not leaks("the live stream", shown, [KEY]), shown[-2000:]
    assert f"Your key is {MARK}, keep it." in deltas, deltas
    events = await d.events(token, sid)
    kinds = [e["kind"] for e in events]
    assert kinds.count("model.responded") == 1 and "model.failed" in kinds, kinds
    # The failed answer keeps what the stream had shown of it, and no more: not the held piece.
    (failed,) = [e["body"] for e in events if e["kind"] == "model.failed"]
    assert failed["partial_text"] == "Your key is ", failed
    view = await d.view(token, sid)
    assert ("assistant", "Your key is ", "failed") in [(it["role"], it["text"], it.get("status")) for it in view["items"]]
    assert not leaks("the view", json.dumps(view), [KEY])


async def test_a_summarizing_request_sends_no_key_stored_before_it_was_known(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An input stored by a daemon that did not know the key holds it; the Working Context then
    # goes to the provider as the compaction's summarizing request (its large items cut to their
    # heads), which was built without the model request's scrub.
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(oc.chat_stream(text="noted"), oc.chat_stream(text="a summary"))
    config = loop_config(url, NAME)
    monkeypatch.setenv(NAME, "other-value-of-the-key-1234")
    d = await daemon_factory(config=config, root=tmp_path / "root")
    token = await d.pair("compact-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "remember " + "w" * 2000 + KEY + " please")
    assert (await d.wait_idle(token, sid, timeout=SLOW))["status"] == "idle"
    await stop_daemon(d)
    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=config, root=tmp_path / "root")
    await d.wait_idle(token, sid, timeout=SLOW)
    r = await d.post(f"/sessions/{sid}/compact", token, {})
    assert r.status_code == 200, r.text
    await wait_until(lambda: _answered(loop, 2), SLOW, "the summarizing request")
    sent = json.dumps(loop.bodies[1])
    assert not leaks("the summarizing request", sent, [KEY]), sent[:2000]
    assert MARK in sent, sent[:2000]


async def _answered(loop: ScriptedServer, n: int) -> bool:
    return len(loop.bodies) >= n


async def test_a_view_and_the_job_tool_preview_a_command_stored_before_its_key_without_a_piece_of_it(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A job's command stored by a daemon that did not know the key, the key across the 2,000th
    # character where the session's view cuts it; served again with the key.
    from runtime.views import QUEUED_PREVIEW_CHARS

    monkeypatch.setenv(NAME, "other-value-of-the-key-1234")
    d = await daemon_factory(config=keyed_config(), root=tmp_path / "root")
    token = await d.pair("view-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    command = "true " + "c" * (QUEUED_PREVIEW_CHARS - INTO - len("true ")) + KEY
    short = "true " + "s" * (120 - INTO - len("true ")) + KEY  # (the job tool's lines cut at 120)
    await run_tool(d, token, sid, "job", "job", {"action": "start", "command": command})
    await run_tool(d, token, sid, "job2", "job", {"action": "start", "command": short})
    await stop_daemon(d)
    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=keyed_config(), root=tmp_path / "root")
    r = await d.get(f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    assert not leaks("the session's view", r.content, [KEY]), r.text[-3000:]
    job = r.json()["jobs"][0]
    assert job["command"] == command[:QUEUED_PREVIEW_CHARS - INTO], job["command"][-40:]
    listed = json.dumps(await run_tool(d, token, sid, "list", "job", {"action": "list"}))
    assert not leaks("the job tool's list", listed, [KEY]), listed
    assert short[:120 - INTO] + "\\u2026" in listed, listed


async def test_an_mcp_tool_result_capped_inside_a_key_shows_no_piece_of_it(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tool result's text is capped at MAX_TEXT_BYTES; the server (given the key by envFrom)
    # answers x's and the key across the cap.
    from tools.mcp.results import MAX_TEXT_BYTES

    from ..mcp.conftest import SERVER

    monkeypatch.setenv(NAME, KEY)
    d = await daemon_factory(config=keyed_config(mcpServers={
        "k": {"command": sys.executable, "args": [SERVER], "envFrom": [NAME]}}))
    token = await d.pair("mcp-result-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]

    async def running() -> bool:
        r = await d.get("/tools/inventory", token)
        return any(s["status"] == "running" for s in r.json()["mcpServers"])

    await wait_until(running, SLOW, "the MCP server running")
    ran = await run_tool(d, token, sid, "big", "mcp__k__big", {"bytes": MAX_TEXT_BYTES - INTO, "then": NAME})
    text = json.dumps(ran)
    assert not leaks("the MCP tool's result", text, [KEY]), text[-400:]
    assert "x" * 100 + MARK[:INTO] in text and "output truncated" in text, text[-400:]


async def test_an_answer_the_log_refused_keeps_the_end_the_scrub_held_until_it_ended(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    # A whole answer whose text ends with what could begin the key ("sk-"), held back while it
    # streamed and shown when the answer ended (it is no key); its call's arguments take its
    # model.responded past log.maxEventBytes. What the refused answer keeps is all the text the
    # viewers were shown, its held end too, and no piece of the key.
    monkeypatch.setenv(NAME, KEY)
    limit = 64 * 1024
    loop = ScriptedServer()
    url = await loop.start(nursery)
    loop.push(oc.chat_stream(text=["Your key begins with ", KEY[:3]],
                             calls=[("call_1", "write_file", {"path": "a.txt", "content": "z" * (limit - 200)})]))
    d = await daemon_factory(config=loop_config(url, NAME, log={"maxEventBytes": limit}))
    token = await d.pair("refused-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "what does my key begin with?")
    view = await d.wait_idle(token, sid, timeout=SLOW)
    (failed,) = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert (failed["code"], failed["partial_text"]) == ("RESPONSE_NOT_RECORDED", f"Your key begins with {KEY[:3]}"), failed
    assert [(it["role"], it.get("status")) for it in view["items"]] == [("user", None), ("assistant", "failed")]
    assert not leaks("the view", json.dumps(view), [KEY])
