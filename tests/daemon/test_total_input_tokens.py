"""F-CTX-5: ``usage.totalInputTokens``, every input token of a request, cached or not, in one
meaning whatever the protocol, over a session whose model changes from Anthropic Messages to
OpenAI Responses (both on loopback servers through the official SDKs). ``inputTokens`` keeps each
protocol's meaning (Anthropic's excludes cache reads and writes, OpenAI's includes them), so its
sum mixes the two; the total does not. A row of an older log, which has no total, is unknown."""

from __future__ import annotations

from typing import Any

import msgspec

from events.codec import Codec

from ..providers.servers import openai_responses as orr
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from ..rawlog import edit_log, log_rows
from .conftest import stop_daemon


def _config(claude: str, resp: str) -> dict[str, Any]:
    return {"providers": [
        {"id": "claude", "protocol": "anthropic", "baseUrl": claude, "models": [{"id": "claude-test"}]},
        {"id": "oa", "protocol": "openai-responses", "baseUrl": resp + "/v1", "models": [{"id": "gpt-test"}]},
    ], "defaultModel": "claude/claude-test"}


async def test_a_session_that_changes_protocol_sums_its_total_input_in_one_meaning(daemon_factory, nursery):
    claude, resp = ScriptedServer(), ScriptedServer()
    config = _config(await claude.start(nursery), await resp.start(nursery))
    # Anthropic: 40 uncached, 600 read from the cache, 150 written to it: 790 in all.
    claude.push(message_stream(text="from claude", usage={
        "input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 600, "cache_creation_input_tokens": 150}))
    # Responses: 1000 in all, 600 of them cached.
    resp.push(orr.response_stream(text="from gpt", usage=orr.usage(1000, 9, cached=600)))
    d = await daemon_factory(config=config)
    token = await d.pair("total-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "oa/gpt-test"})
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r2", "again")
    view = await d.wait_idle(token, sid)
    assert [it.get("text") for it in view["items"] if it["role"] == "assistant"] == ["from claude", "from gpt"]

    per_request = [e["body"]["usage"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert [(u["input_tokens"], u["total_input_tokens"]) for u in per_request] == [(40, 790), (1000, 1000)]
    usage = view["usage"]
    assert usage["inputTokens"] == 1040  # (as before: two meanings summed)
    assert usage["totalInputTokens"] == 1790  # (one meaning: every input token of both requests)
    assert usage["cacheReadTokens"] == 1200
    assert usage["unreported"]["totalInputTokens"] == 0
    [main] = view["agents"]
    assert (main["usage"]["inputTokens"], main["usage"]["totalInputTokens"]) == (1040, 1790)
    await stop_daemon(d)

    # The Anthropic answer's row as a build before the total wrote it: its usage has no total.
    codec = Codec()
    first = log_rows(d.data_dir, "SELECT seq, body, dict_id FROM events WHERE kind = 'model.responded' ORDER BY seq")[0]
    seq, body, dict_id = first
    raw = msgspec.msgpack.decode(codec.decompress(body, dict_id))
    assert raw["usage"].pop("total_input_tokens") == 790
    older = msgspec.msgpack.encode(raw)
    ([framed], framed_dict) = codec.compress_many([older])
    edit_log(d.data_dir, "UPDATE events SET body = ?, raw_size = ?, dict_id = ? WHERE seq = ?",
             (framed, len(older), framed_dict, seq))
    for derived in d.data_dir.glob("projections.db*"):  # (its snapshot too: folded from the log again)
        derived.unlink()

    d2 = await daemon_factory(config=config, root=d.root)
    view = await d2.view(token, sid)
    per_request = [e["body"]["usage"] for e in await d2.events(token, sid) if e["kind"] == "model.responded"]
    assert [(u["input_tokens"], u["total_input_tokens"]) for u in per_request] == [(40, None), (1000, 1000)]
    usage = view["usage"]
    assert (usage["inputTokens"], usage["totalInputTokens"]) == (1040, 1000)
    assert usage["unreported"]["totalInputTokens"] == 1  # (a lower bound now, never the row taken as 0)
    assert usage["unreported"]["inputTokens"] == 0
