"""SPEC §3 F-CTX-1 … F-CTX-5 at their edges through a running daemon: what earlier passes left
untried (see "Context at its edges through a real daemon" in docs/decisions.md)."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, stop_daemon
from .test_context_http import _session

FILLER = "word " * 50_000  # (about 62,500 estimated tokens: past half of a 100,000-token window)


def _faux(script: list[dict[str, Any]], **context: Any) -> dict[str, Any]:
    return {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 100_000}],
                           "script": script}],
            "defaultModel": "faux/m1", "context": {"compaction": {"triggerPercent": 50}, **context}}


async def _failed_compactions(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    return [e["body"] for e in await d.events(token, sid) if e["kind"] == "context.compaction_failed"]


async def test_an_automatic_compaction_whose_summary_request_fails_is_recorded_and_counts_no_request(
        daemon_factory):
    # F-CTX-2 with a summarizer that fails at once: the request went on as it was, and nothing but
    # the daemon's log said a compaction had been tried and why it failed; the user, the
    # dashboard and `GET …/events` saw a context past its threshold and no word.
    config = _faux([{"when": "Summarize the conversation so far",
                     "error": {"code": "OVERLOADED", "message": "the summarizer is busy"}},
                    {"when": "call a tool", "toolCalls": [{"name": "get_system_time", "arguments": {}}]}])
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    await d.submit(token, sid, "r1", "call a tool " + FILLER)
    view = await d.wait_idle(token, sid)
    assert [it["role"] for it in view["items"]] == ["user", "tool_call", "assistant"], view["items"]
    assert view["items"][-1]["text"].startswith("The tool answered"), view["items"][-1]
    # Tried once, before the request after the tool's result (the first one held only the input,
    # which a compaction keeps as written).
    assert await _failed_compactions(d, token, sid) == [{
        "code": "COMPACTION_FAILED", "message": "the summarizing request failed: OVERLOADED: the summarizer is busy",
        "trigger": "auto", "usage": None, "provider": "faux", "model": "m1"}]
    # The Working Context is as it was, and the request that never got an answer is no request
    # of the session's usage (its counts unknown, not guessed, and not one more "unreported").
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["compactions"] == 0 and context["workingItemIds"] == [it["id"] for it in context["items"]]
    assert context["estimatedTokens"] >= context["compactionThreshold"] == 50_000
    usage = view["usage"]
    assert usage["requests"] == 2 and usage["unreported"]["inputTokens"] == 0, usage

    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    assert (await d2.view(token, sid))["usage"] == usage
