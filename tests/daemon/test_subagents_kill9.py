"""F-ACT-4 with F-ACT-5: ``lens serve`` SIGKILLed while a subagent runs a command.

The restart resumes the parent's ``subagent`` call (replay-safe: the same subagent, its id from
the call's), reports the subagent's command interrupted to the subagent (``run_command`` is not
replay-safe), lets it answer, and hands that answer to the parent as the call's result: each call
started once, each finished once. Real ``lens serve`` processes on one data directory, the real
executor, ``lens log verify`` over the log they leave."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import trio

from .conftest import LIMIT, run_lens, serving, wait_until
from .test_jobs import setup

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "delegate", "toolCalls": [{"name": "subagent", "arguments": {"prompt": "SUBRUN the command"}}],
     "inputTokens": 11, "outputTokens": 1},
    {"when": "SUBRUN", "toolCalls": [{"name": "run_command", "arguments": {"command": "exec sleep 120"}}],
     "inputTokens": 22, "outputTokens": 2},
    {"when": "This tool call was interrupted", "text": "the command was cut off", "inputTokens": 33, "outputTokens": 3},
    {"when": "the command was cut off", "text": "understood", "inputTokens": 44, "outputTokens": 4},
]}], "defaultModel": "faux/faux-1"}


async def test_a_kill_9_mid_subagent_resumes_it_and_its_answer_reaches_the_parent(tmp_path: Path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(CONFIG))
    with trio.fail_after(4 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token, sid = await setup(d)
            await d.submit(token, sid, "r1", "delegate")

            async def sub_running():
                return [e for e in await d.events(token, sid)
                        if e["kind"] == "tool.started" and e["body"]["name"] == "run_command"]

            await wait_until(sub_running, what="the subagent's command")
            assert serve.proc is not None
            serve.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(LIMIT):
                assert await serve.proc.wait() == -signal.SIGKILL

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d2):
            view = await d2.wait_idle(token, sid)
            events = await d2.events(token, sid)
            sub = "sub_" + next(e["body"]["call_id"] for e in events if e["kind"] == "tool.started")
            calls = [(e["kind"], e["agent_id"] == sub, e["body"]["name"], e["body"].get("status"))
                     for e in events if e["kind"] in ("tool.started", "tool.finished")]
            assert calls == [("tool.started", False, "subagent", None), ("tool.started", True, "run_command", None),
                             ("tool.finished", True, "run_command", "interrupted"),
                             ("tool.finished", False, "subagent", "ok")]
            assert [(e["agent_id"], e["body"]) for e in events if e["kind"] == "agent.finished"] == [
                (sub, {"status": "completed", "result": "the command was cut off"})]
            [result] = [e for e in events if e["kind"] == "tool.finished" and e["agent_id"] == "main"]
            assert result["body"]["content"][0]["text"] == "the command was cut off"
            assert [e["body"]["status"] for e in events if e["kind"] == "task.finished"] == ["completed"]
            assert [(a["agentId"], a["status"]) for a in view["agents"]] == [("main", "idle"), (sub, "completed")]
            # Usage: what each agent's answers reported, and the session's the sum.
            usage = {a["agentId"]: (a["usage"]["requests"], a["usage"]["inputTokens"]) for a in view["agents"]}
            assert usage == {"main": (2, 11 + 44), sub: (2, 22 + 33)}
            assert (view["usage"]["requests"], view["usage"]["inputTokens"]) == (4, 110)
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr
