"""SPEC §3 F-CTX-2 … F-CTX-5 driven over HTTP as a client who has read only the spec, README and
docs/: the edges the first two passes (test_context_acceptance.py, test_context_second_pass.py)
leave out — a summary the provider stopped before it was done for a reason other than the output
limit, snips and forks in either order, a context emptied by snips or hides, and usage a provider
reports in part."""

from __future__ import annotations

from typing import Any

from ..providers.servers import openai_responses as orr
from ..providers.servers.base import Reply, ScriptedServer
from .conftest import error_of, stop_daemon
from .keyleaks import loop_config

KEY_ENV = "LENS_TEST_CTX3_KEY"
SUMMARIZE = "Summarize the conversation so far"


def _faux(*script: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                           "script": list(script)}],
            "defaultModel": "faux/m1", **more}


async def _session(d, name: str = "p") -> tuple[str, str, str]:
    token = await d.pair("ctx3", strong=True)
    project = await d.project(token, name)
    return token, project["id"], (await d.session(token, project["id"]))["id"]


async def _turn(d, token: str, sid: str, rid: str, text: str) -> dict[str, Any]:
    await d.submit(token, sid, rid, text)
    return await d.wait_idle(token, sid)


async def _context(d, token: str, sid: str, **params: str) -> dict[str, Any]:
    r = await d.get(f"/sessions/{sid}/context", token, params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def _assert_summary_refused(d, token: str, sid: str, words: str) -> None:
    """A manual compaction whose summarizing answer ended unfinished: 502 COMPACTION_FAILED naming
    why, the Working Context as it was, the failure shown by the context route, and the request
    (which the provider answered) counted in the session's usage."""
    before = await _context(d, token, sid)
    requests = (await d.view(token, sid))["usage"]["requests"]
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 502 and error_of(r) == "COMPACTION_FAILED", r.text
    assert words in r.json()["error"]["message"], r.text
    after = await _context(d, token, sid)
    assert after["workingItemIds"] == before["workingItemIds"] and after["compactions"] == 0, after
    assert after["compactionFailed"]["code"] == "COMPACTION_FAILED", after
    assert words in after["compactionFailed"]["message"], after
    view = await d.view(token, sid)
    assert view["usage"]["requests"] == requests + 1, view["usage"]
    assert all(it["role"] != "summary" for it in view["items"]), view["items"]


async def test_a_summary_stopped_at_the_providers_message_limit_replaces_nothing(daemon_factory):
    # F-CTX-2: a summarizing answer the provider stopped before it was done is no summary. The
    # output limit, a refusal and a content filter were refused; an answer stopped at a Responses
    # limit on messages (max_messages, a cut: see docs/decisions.md) replaced the whole
    # conversation with the part written before the stop.
    d = await daemon_factory(config=_faux({"when": SUMMARIZE, "text": "SUMMARY: the user said hel",
                                           "stopReason": "max_messages"}))
    token, _pid, sid = await _session(d)
    await _turn(d, token, sid, "r1", "hello there")
    await _assert_summary_refused(d, token, sid, "max_messages")


def _incomplete_summary(reason: str | None) -> Reply:
    """A Responses summary that ends ``incomplete`` for ``reason`` (None: the response gives no
    ``incomplete_details``, as a proxy may send it)."""
    scripted = orr.response_stream(text="SUMMARY: the user said hel", status="incomplete", usage=orr.usage(300, 9))
    name, data = scripted.events[-1]
    details = {"reason": reason} if reason is not None else None
    scripted.events[-1] = (name, {**data, "response": {**data["response"], "incomplete_details": details}})
    return scripted


async def test_a_responses_summary_left_incomplete_for_any_reason_replaces_nothing(daemon_factory, nursery, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-ctx3-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = loop_config(url, KEY_ENV)
    config["providers"] = [{**config["providers"][0], "protocol": "openai-responses"}]
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    loop.push(orr.response_stream(text="first answer", usage=orr.usage(100, 3)))
    await _turn(d, token, sid, "r1", "hello there")
    for reason, words in (("max_messages", "max_messages"), (None, "incomplete"),
                          ("max_output_tokens", "max_tokens")):
        loop.push(_incomplete_summary(reason))
        await _assert_summary_refused(d, token, sid, words)
    # A summary that ends whole still compacts: the refusals above are of the unfinished ones.
    loop.push(orr.response_stream(text="SUMMARY: the user said hello.", usage=orr.usage(300, 9)))
    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200 and r.json()["summary"] == "SUMMARY: the user said hello.", r.text
