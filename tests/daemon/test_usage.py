"""F-CTX-5 over HTTP: usage per request (each model.responded) and per session (the view), from
provider-reported counts; a count a provider did not report stays unknown, never taken as 0."""

from __future__ import annotations

from .conftest import stop_daemon

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "first", "text": "one", "inputTokens": 100, "outputTokens": 5, "cacheReadTokens": 80,
     "cacheWriteTokens": 20, "reasoningTokens": 3},
    {"when": "second", "text": "two", "inputTokens": 50, "outputTokens": 7},
]}], "defaultModel": "faux/faux-1"}


async def test_session_totals_say_how_many_requests_did_not_report_a_count(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("usage-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "first")
    await d.wait_idle(token, sid)
    usage = (await d.view(token, sid))["usage"]
    assert usage == {"requests": 1, "inputTokens": 100, "outputTokens": 5, "cacheReadTokens": 80,
                     "cacheWriteTokens": 20, "reasoningTokens": 3, "totalInputTokens": 100,
                     "unreported": {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0,
                                    "cacheWriteTokens": 0, "reasoningTokens": 0, "totalInputTokens": 0}}

    await d.submit(token, sid, "r2", "second")
    await d.wait_idle(token, sid)
    per_request = [e["body"]["usage"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert per_request[1] == {"input_tokens": 50, "output_tokens": 7, "cache_read_tokens": None,
                              "cache_write_tokens": None, "reasoning_tokens": None, "total_input_tokens": 50}
    usage = (await d.view(token, sid))["usage"]
    # The second answer reported no cache or reasoning counts: those totals are lower bounds.
    assert usage == {"requests": 2, "inputTokens": 150, "outputTokens": 12, "cacheReadTokens": 80,
                     "cacheWriteTokens": 20, "reasoningTokens": 3, "totalInputTokens": 150,
                     "unreported": {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 1,
                                    "cacheWriteTokens": 1, "reasoningTokens": 1, "totalInputTokens": 0}}

    # The same from the log after a restart.
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.view(token, sid))["usage"] == usage
