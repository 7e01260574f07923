"""Prompt-cache breakpoints (F-MOD-4): OpenAI explicit (config-driven, input blocks only, ttl)
and Anthropic lookback positions (runs count once; the older anchor at 20 new positions)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from runtime.config import ModelConfig
from runtime.providers import caching
from runtime.providers.base import ProviderError

from .conftest import Ctx, Deltas, image_part
from .scripts import reply


def marked(obj: Any, key: str, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every ``key`` in a JSON body."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                yield path, v
            yield from marked(v, key, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from marked(v, key, f"{path}[{i}]")


def long_history(turns: int) -> Ctx:
    ctx = Ctx().user("start")
    for i in range(turns):
        ctx.response(f"step {i}", (f"call_{i}", "read_file", {"path": f"f{i}"})).result(f"call_{i}", f"content {i}")
    return ctx.user("continue")


# --------------------------------------------------------------------------- OpenAI explicit


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_openai_explicit_cache_comes_from_config_not_the_model_name(protocol, server, make):
    provider = make(protocol, models={"gpt-5.6": ModelConfig(id="gpt-5.6"),  # a caching-capable name, not configured so
                                      "local-llm": ModelConfig(id="local-llm", explicit_cache=True)})
    server.push(reply(protocol, text="a"), reply(protocol, text="b"))
    r1 = await provider.stream(long_history(1).request("gpt-5.6"), Deltas())
    r2 = await provider.stream(long_history(1).request("local-llm"), Deltas())
    b1, b2 = server.bodies
    assert "prompt_cache_options" not in b1 and list(marked(b1, "prompt_cache_breakpoint")) == []
    assert "cache" not in r1.diagnostics
    assert b2["prompt_cache_options"] == {"mode": "explicit", "ttl": "30m"}
    assert len(list(marked(b2, "prompt_cache_breakpoint"))) == len(r2.diagnostics["cache"]["breakpoints"]) > 0


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_openai_breakpoints_only_on_input_blocks_past_twenty_positions(protocol, server, make):
    provider = make(protocol, models={"m1": ModelConfig(id="m1", explicit_cache=True)})
    server.push(reply(protocol, text="ok"))
    result = await provider.stream(long_history(12).request(), Deltas())  # > 20 blocks: no lookback limit here
    body = server.bodies[0]
    found = list(marked(body, "prompt_cache_breakpoint"))
    assert len(found) == 4  # system end, the two previous requests' tails, this tail
    assert all(bp == {"mode": "explicit"} for _, bp in found)
    reasons = [b["reason"] for b in result.diagnostics["cache"]["breakpoints"]]
    assert reasons == ["system", "previous", "previous", "tail"]
    kinds = [b["kind"] for b in result.diagnostics["cache"]["breakpoints"]]
    assert kinds == ["system", "result", "result", "user"]
    msgs = body["input"] if protocol == "openai-responses" else body["messages"]
    for path, _ in found:  # never on assistant output
        index = int(path.split("]")[0].split("[")[1])
        m = msgs[index]
        assert m.get("role") != "assistant" and m.get("type") != "function_call"
    # The two previous requests ended with the results that the last two responses answered.
    ids = [b["item_ids"] for b in result.diagnostics["cache"]["breakpoints"]]
    assert ids[1:3] == [[f"c{3 + 2 * 9}"], [f"c{3 + 2 * 10}"]]  # results of rounds 9 and 10


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
async def test_openai_12h_is_sent_per_breakpoint(protocol, server, make):
    provider = make(protocol, models={"m1": ModelConfig(id="m1", explicit_cache=True)}, cache_ttl="12h")
    server.push(reply(protocol, text="ok"))
    result = await provider.stream(long_history(2).request(), Deltas())
    body = server.bodies[0]
    assert body["prompt_cache_options"] == {"mode": "explicit", "ttl": "30m"}  # the request-level lifetime
    found = [bp for _, bp in marked(body, "prompt_cache_breakpoint")]
    assert found and all(bp == {"mode": "explicit", "ttl": "12h"} for bp in found)
    assert {b["ttl"] for b in result.diagnostics["cache"]["breakpoints"]} == {"12h"}


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
@pytest.mark.parametrize("ttl", ["1h", "5m", "24h", ""])
async def test_openai_unsupported_ttl_is_refused_before_sending(ttl, protocol, server, make):
    provider = make(protocol, models={"m1": ModelConfig(id="m1", explicit_cache=True)}, cache_ttl=ttl or "bogus")
    with pytest.raises(ProviderError) as info:
        await provider.stream(long_history(1).request(), Deltas())
    assert info.value.code == "CACHE_TTL_UNSUPPORTED" and "30m" in info.value.message
    assert server.requests == []


async def test_openai_breakpoint_on_a_tool_result_with_an_image(server, make, artifacts):
    provider = make("openai-responses", models={"m1": ModelConfig(id="m1", explicit_cache=True, images=True)},
                    load_image=artifacts.load)
    part = image_part(artifacts.store)
    ctx = Ctx().user("look").response("", ("v1", "view_image", {"path": "a.png"})).result("v1", "an image", part)
    server.push(reply("openai-responses", text="a cat"))
    await provider.stream(ctx.request(), Deltas())
    out = [m for m in server.bodies[0]["input"] if m.get("type") == "function_call_output"][0]["output"]
    assert [p["type"] for p in out] == ["input_text", "input_image"]
    assert out[-1]["prompt_cache_breakpoint"] == {"mode": "explicit"}  # the tail: the image block


async def test_chat_tail_breakpoint_is_on_the_images_a_tool_returned(server, make, artifacts):
    """Chat sends a tool's images after the tool messages, in a user message: that message ends
    the request, so the tail breakpoint goes on its last image (it was put on the tool message's
    text before it, leaving the images out of the prefix the next request reads back)."""
    provider = make("openai-chat", models={"m1": ModelConfig(id="m1", explicit_cache=True, images=True)},
                    load_image=artifacts.load)
    ctx = (Ctx().user("look").response("", ("v1", "view_image", {"path": "a.png"}), ("t1", "get_system_time", {}))
           .result("v1", "an image", image_part(artifacts.store)).result("t1", "noon"))
    server.push(reply("openai-chat", text="a cat"), reply("openai-chat", text="done"))
    first = await provider.stream(ctx.request(), Deltas())
    msgs = server.bodies[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert msgs[-1]["content"][-1]["type"] == "image_url"
    assert msgs[-1]["content"][-1]["prompt_cache_breakpoint"] == {"mode": "explicit"}
    tails = [bp for bp in first.diagnostics["cache"]["breakpoints"] if bp["reason"] == "tail"]
    assert len(tails) == 1 and tails[0]["kind"] == "result"
    # The next request reads that prefix back: the same image block is marked as the previous tail.
    ctx.response(first.text).user("and now?")
    await provider.stream(ctx.request(), Deltas())
    again = server.bodies[1]["messages"]
    assert again[:6] == msgs  # the same prefix, its marks included: the image block is the previous tail


def test_openai_breakpoint_choice_is_pure():
    C = caching.Candidate
    cands = [C(0, True), C(1), C(3), C(5), C(7)]
    assert caching.openai_breakpoints(cands, tails=[1, 3, 5]) == [(0, "system"), (2, "previous"), (3, "previous"), (4, "tail")]
    assert caching.openai_breakpoints(cands[:1], tails=[]) == [(0, "tail")]
    assert caching.openai_breakpoints([], tails=[]) == []


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_anchor_appears_at_exactly_twenty_new_positions():
    assert caching.anthropic_breakpoints(20, tails=[0]) == [(19, "tail")]  # 19 new positions
    assert caching.anthropic_breakpoints(21, tails=[0]) == [(0, "anchor"), (20, "tail")]  # 20 new positions
    assert caching.anthropic_breakpoints(45, tails=[3, 24]) == [(24, "anchor"), (44, "tail")]
    assert caching.anthropic_breakpoints(30, tails=[3, 24]) == [(29, "tail")]
    assert caching.anthropic_breakpoints(1, tails=[]) == [(0, "tail")]


def test_anthropic_runs_of_calls_and_results_count_as_one_position():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "u"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "1"},
                                          {"type": "tool_use", "id": "2"}, {"type": "tool_use", "id": "3"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1"}, {"type": "tool_result", "tool_use_id": "2"},
                                     {"type": "tool_result", "tool_use_id": "3"}, {"type": "text", "text": "update"}]},
    ]
    positions, tails = caching.anthropic_positions(messages)
    assert [(p.message, p.block, p.kind) for p in positions] == [
        (0, 0, "text"), (1, 0, "text"), (1, 3, "tool_use"), (2, 2, "tool_result"), (2, 3, "text")]
    assert tails == [0]


def edge_history(new_positions: int) -> Ctx:
    """u0 | a0 | then user blocks: the earlier request's tail is position 0."""
    ctx = Ctx().user("u0").response("a0")
    for i in range(new_positions - 1):
        ctx.user(f"u{i + 1}")
    return ctx


@pytest.mark.parametrize("new, anchored", [(19, False), (20, True), (21, True)])
async def test_anthropic_breakpoints_on_the_wire_at_the_edge(new, anchored, server, make):
    provider = make("anthropic")
    server.push(reply("anthropic", text="ok"))
    result = await provider.stream(edge_history(new).request(), Deltas())
    body = server.bodies[0]
    cache = result.diagnostics["cache"]
    assert cache["positions"] == new + 1
    found = [p for p, _ in marked(body, "cache_control")]
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    tail = f".messages[2].content[{new - 2}]"
    anchor = ".messages[0].content[0]"
    expected = [".tools[1]", ".system[0]"] + ([anchor] if anchored else []) + [tail]
    assert sorted(found) == sorted(expected)
    assert [b["reason"] for b in cache["breakpoints"]] == ["tools", "system"] + (["anchor"] if anchored else []) + ["tail"]
    assert len(found) <= caching.ANTHROPIC_MAX_BREAKPOINTS


async def test_anthropic_tool_rounds_count_once_on_the_wire(server, make):
    provider = make("anthropic")
    server.push(reply("anthropic", text="ok"))
    ctx = Ctx().user("go")
    for r in range(7):  # each round: text + 3 calls (2 positions), 3 results (1 position)
        calls = [(f"c{r}_{k}", "read_file", {"path": str(k)}) for k in range(3)]
        ctx.response(f"round {r}", *calls)
        for c in calls:
            ctx.result(c[0], "ok")
    result = await provider.stream(ctx.request(), Deltas())
    cache = result.diagnostics["cache"]
    assert cache["positions"] == 1 + 7 * 3
    # The newest earlier tail (the 6th round's results) is 3 positions back: no anchor needed.
    assert [b["reason"] for b in cache["breakpoints"]] == ["tools", "system", "tail"]
    last = server.bodies[0]["messages"][-1]["content"]
    assert "cache_control" in last[-1] and all("cache_control" not in b for b in last[:-1])


async def test_anthropic_a_changed_system_prompt_still_reads_the_tools_entry(server, make):
    # The request's prefixes are the tools, then the system prompt, then the messages. Only the
    # system prompt's end was marked when there was one: an edit of an AGENTS.md (or a skill
    # added), which changes the system prompt, left no entry to read for the tools before it,
    # and every tool definition was written to the cache again. The tools' end is marked too.
    provider = make("anthropic")
    server.push(reply("anthropic", text="ok"), reply("anthropic", text="ok"), reply("anthropic", text="ok"))
    ctx = edge_history(20)  # (the anchor too: four breakpoints, the most the API takes)
    r1 = await provider.stream(ctx.request(system=["rules: tabs"]), Deltas())
    r2 = await provider.stream(ctx.request(system=["rules: spaces"]), Deltas())
    b1, b2 = server.bodies
    assert b1["tools"] == b2["tools"] and b1["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in tool for tool in b1["tools"][:-1])
    assert b1["system"][-1]["cache_control"] == b2["system"][-1]["cache_control"] == {"type": "ephemeral"}
    for r, b in ((r1, b1), (r2, b2)):
        assert [bp["reason"] for bp in r.diagnostics["cache"]["breakpoints"]] == ["tools", "system", "anchor", "tail"]
        assert len(list(marked(b, "cache_control"))) == caching.ANTHROPIC_MAX_BREAKPOINTS
    # Without a system prompt the tools' end is the one prefix mark.
    await provider.stream(Ctx().user("hi").request(system=[]), Deltas())
    b3 = server.bodies[2]
    assert "system" not in b3 and sorted(p for p, _ in marked(b3, "cache_control")) == [".messages[0].content[0]", ".tools[1]"]
