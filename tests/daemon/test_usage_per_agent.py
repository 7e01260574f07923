"""F-CTX-5 with F-ACT-5: each agent's usage, and the session's as the sum of its agents', equal
what the provider reported, over subagents that answer, fail and are aborted mid-stream, and
across a restart (the totals are folded from the log again).

An Anthropic Messages server on loopback (the official SDK, the real wire protocol) plays every
answer; the expected counts are the ones the scripted frames carry."""

from __future__ import annotations

from typing import Any

from ..providers.servers.anthropic import error, message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import stop_daemon, wait_until

COUNTS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens", "totalInputTokens")


def _config(url: str) -> dict:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                           "models": [{"id": "claude-test", "contextWindow": 50000}]}],
            "defaultModel": "claude/claude-test"}


def _answer(input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, **kw: Any) -> Any:
    return message_stream(usage={"input_tokens": input_tokens, "output_tokens": 1,
                                 "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write},
                          output_tokens=output_tokens, **kw)


def _total(*reported: tuple[int | None, int | None, int | None, int | None]) -> dict[str, Any]:
    """What a view's usage says for these answered requests (reasoning never reported here; the
    total input is Anthropic's input, cache reads and cache writes, known when all three are)."""
    out: dict[str, Any] = {"requests": len(reported)}
    unreported = dict.fromkeys(COUNTS, 0)
    for i, name in enumerate(COUNTS):
        if name == "totalInputTokens":
            values = [None if None in (r[0], r[2], r[3]) else r[0] + r[2] + r[3] for r in reported]
        else:
            values = [r[i] if i < 4 else None for r in reported]
        known = [v for v in values if v is not None]
        out[name] = sum(known) if known else None
        unreported[name] = len(values) - len(known)
    out["unreported"] = unreported
    return out


async def test_each_agents_usage_and_the_sessions_sum_are_what_the_provider_reported(daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(
        _answer(100, 11, 5, 7, calls=[("toolu_a", "subagent", {"prompt": "first part"}),
                                      ("toolu_b", "subagent", {"prompt": "second part"})]),
        _answer(20, 3, 0, 2, text="part one done"),           # subagent a
        error(400, "this request is refused"),                  # subagent b: failed, nothing counted
        _answer(130, 13, 100, 0, text="both asked"),            # main again
        _answer(40, 4, 1, 1, calls=[("toolu_c", "subagent", {"prompt": "a long part"})]),
        # subagent c: message_start (its counts), ping, the text block's start, one delta; then nothing
        message_stream(text=["Hel", "lo"], usage={"input_tokens": 321, "output_tokens": 1}, stall_after=4),
    )
    d = await daemon_factory(config=_config(url))
    token = await d.pair("usage-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "split the work")
    await d.wait_idle(token, sid)
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r2", "one more part")
        await stream.until(lambda m: m.event == "model.delta" and m.json()["agent_id"] == "sub_toolu_c")
        r = await d.post(f"/sessions/{sid}/abort", token)
        assert r.status_code == 200 and r.json()["aborted"] is True, r.text

    main = _total((100, 11, 5, 7), (130, 13, 100, 0), (40, 4, 1, 1))
    sub_a = _total((20, 3, 0, 2))
    sub_b = _total()
    sub_c = _total((321, None, None, None))
    session = _total((100, 11, 5, 7), (20, 3, 0, 2), (130, 13, 100, 0), (40, 4, 1, 1), (321, None, None, None))
    expected = {"main": main, "sub_toolu_a": sub_a, "sub_toolu_b": sub_b, "sub_toolu_c": sub_c}

    def check(view: dict[str, Any]) -> None:
        assert {a["agentId"]: a["usage"] for a in view["agents"]} == expected
        assert view["usage"] == session
        assert [(a["agentId"], a["status"]) for a in view["agents"]] == [
            ("main", "idle"), ("sub_toolu_a", "completed"), ("sub_toolu_b", "failed"), ("sub_toolu_c", "aborted")]

    check(await d.view(token, sid))
    # The same, folded from the log alone after a restart.
    await stop_daemon(d)
    d2 = await daemon_factory(config=_config(url), root=d.root)

    async def woke() -> dict[str, Any]:
        return await d2.view(token, sid)

    check(await wait_until(woke))
    # A fork counts its own requests only: its agents start at none.
    fork_at = [e for e in await d2.events(token, sid) if e["kind"] == "agent.finished"][0]["seq"]
    r = await d2.post(f"/sessions/{sid}/fork", token, {"seq": fork_at})
    assert r.status_code == 201, r.text
    assert r.json()["usage"] == _total()
    assert {a["agentId"]: a["usage"] for a in r.json()["agents"]} == {"main": _total(), "sub_toolu_a": _total()}


async def test_a_subagent_cut_off_by_a_stop_is_asked_again_and_both_requests_count(daemon_factory, nursery):
    # The stop records what the cut-off request had reported (``model.cut_off``, under the
    # subagent); the restart resumes the subagent (its parent's call is replay-safe), asks its
    # request again, and the parent gets its answer. Every count the server sent is in the totals.
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(
        _answer(60, 6, 0, 0, calls=[("toolu_s", "subagent", {"prompt": "slow part"})]),
        message_stream(text=["Hel", "lo"], usage={"input_tokens": 77, "output_tokens": 1}, stall_after=4),
    )
    d = await daemon_factory(config=_config(url))
    token = await d.pair("usage-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "do it")
        await stream.until(lambda m: m.event == "model.delta" and m.json()["agent_id"] == "sub_toolu_s")
    await stop_daemon(d)
    server.push(_answer(78, 8, 70, 0, text="slow part done"), _answer(90, 9, 50, 5, text="all done"))
    d2 = await daemon_factory(config=_config(url), root=d.root)
    view = await d2.wait_idle(token, sid)
    events = await d2.events(token, sid)
    [cut] = [e for e in events if e["kind"] == "model.cut_off"]
    assert cut["agent_id"] == "sub_toolu_s" and cut["body"]["usage"]["input_tokens"] == 77
    [result] = [e for e in events if e["kind"] == "tool.finished"]
    assert (result["body"]["status"], result["body"]["content"][0]["text"]) == ("ok", "slow part done")
    assert {a["agentId"]: a["usage"] for a in view["agents"]} == {
        "main": _total((60, 6, 0, 0), (90, 9, 50, 5)),
        "sub_toolu_s": _total((77, None, None, None), (78, 8, 70, 0))}
    assert view["usage"] == _total((60, 6, 0, 0), (77, None, None, None), (78, 8, 70, 0), (90, 9, 50, 5))
    assert [(a["agentId"], a["status"]) for a in view["agents"]] == [("main", "idle"), ("sub_toolu_s", "completed")]
