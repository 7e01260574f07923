"""What a compaction keeps as written (F-CTX-1, F-CTX-2), on the real daemon against an Anthropic
Messages server on loopback (the official SDK, the real wire protocol): the newest round, up to
``context.compaction.keepRecentTokens``, is not in the summarizing request and reaches the next
model request word for word after the summary — also after a restart, from the log; exactly at
the budget it is kept, one token past it it is cut inside (its answer kept, its input summarized
with the rest)."""

from __future__ import annotations

from typing import Any

import pytest

from projections.context_budget import text_tokens

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import stop_daemon

KEEP = 300  # keepRecentTokens; the threshold (80% of 50,000) halved is far above it
SUMMARY = "SUMMARY: a quokka named Pim was discussed."
FIRST_ANSWER = "Noted: the first thing."
SECOND_ANSWER = "Noted: the second thing."


def _config(url: str) -> dict:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                           "models": [{"id": "claude-test", "contextWindow": 50000}]}],
            "defaultModel": "claude/claude-test",
            "context": {"compaction": {"auto": False, "keepRecentTokens": KEEP}}}


def _texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each text block of a Messages request, in order."""
    out = []
    for m in body["messages"]:
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [(m["role"], b["text"]) for b in blocks if b.get("type") == "text"]
    return out


def _answer(text: str) -> Any:
    return message_stream(text=text, usage={"input_tokens": 10, "output_tokens": 1})


@pytest.mark.parametrize("past", [0, 1], ids=["exactly at the budget", "one token past it"])
async def test_the_newest_round_is_kept_as_written_up_to_the_budget_and_across_a_restart(
        daemon_factory, nursery, past):
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(_answer(FIRST_ANSWER), _answer(SECOND_ANSWER), _answer(SUMMARY), _answer("Pim."))
    d = await daemon_factory(config=_config(url))
    token = await d.pair("keep-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "my quokka is named Pim")
    await d.wait_idle(token, sid)
    # The newest round (this input and its answer) estimated at exactly KEEP tokens, or one more.
    second = "q" * (4 * (KEEP - text_tokens(SECOND_ANSWER)) + past)
    assert text_tokens(second) + text_tokens(SECOND_ANSWER) == KEEP + past
    await d.submit(token, sid, "r2", second)
    await d.wait_idle(token, sid)
    items = [v["id"] for v in (await d.view(token, sid))["items"]]
    assert len(items) == 4

    r = await d.post(f"/sessions/{sid}/compact", token)
    assert r.status_code == 200, r.text
    compacted = r.json()
    summarizing = _texts(server.requests[2].body)
    assert "Summarize the conversation so far" in summarizing[-1][1]
    if past:
        # Over the budget: the round is not kept whole. It is cut inside (see "A compaction that
        # cuts inside a long turn"): its input does not fit beside its answer, so the input is
        # summarized with the rest and the answer alone is kept.
        assert compacted["replacedItemIds"] == items[:3]
        assert ("user", second) in summarizing
        assert all(SECOND_ANSWER not in text for _role, text in summarizing)
    else:
        # The newest round is kept: not in the summarizing request, not replaced.
        assert compacted["replacedItemIds"] == items[:2]
        assert ("user", "my quokka is named Pim") in summarizing and ("assistant", FIRST_ANSWER) in summarizing
        assert all(second not in text and SECOND_ANSWER not in text for _role, text in summarizing)
    view = await d.view(token, sid)
    kept = items[3:] if past else items[2:]
    assert [v["context"] for v in view["items"]] == [
        "visible" if i in kept else "compacted" for i in items] + ["visible"]
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["workingItemIds"] == [compacted["itemId"], *kept]

    # The Working Context rebuilt from the log after a restart is the same, and the next request
    # reads the summary, then the kept round word for word, then the new input.
    await stop_daemon(d)
    d2 = await daemon_factory(config=_config(url), root=d.root)
    assert (await d2.get(f"/sessions/{sid}/context", token)).json() == context
    await d2.submit(token, sid, "r3", "what is my quokka called?")
    await d2.wait_idle(token, sid)
    after = _texts(server.requests[3].body)
    assert after[0][1].find(SUMMARY) >= 0
    assert after[1:] == ([] if past else [("user", second)]) + [
        ("assistant", SECOND_ANSWER), ("user", "what is my quokka called?")]
    assert len(server.requests) == 4
