"""What each provider's wire format demands of a request's conversation, as its API checks it:
the tool calls and their results paired, in the places the protocol allows. Used on rendered
requests (the compile properties) and on what a loopback server received (daemon tests)."""

from __future__ import annotations

from typing import Any


def check_anthropic_turns(body: dict[str, Any]) -> None:
    """Messages: roles alternate, starting with ``user``; every ``tool_use`` is answered by a
    ``tool_result`` first in the very next user turn, one per call, in call order; no
    ``tool_result`` anywhere else."""
    msgs = body["messages"]
    assert msgs and msgs[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in zip(msgs, msgs[1:])), [m["role"] for m in msgs]
    for k, m in enumerate(msgs):
        assert isinstance(m["content"], list)
        uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        if m["role"] == "assistant" and uses:
            nxt = msgs[k + 1]["content"]
            assert [b.get("tool_use_id") for b in nxt[:len(uses)]] == uses
            assert all(b["type"] != "tool_result" for b in nxt[len(uses):])
        for b in m["content"]:
            if b["type"] == "tool_result":
                prev = [u["id"] for u in msgs[k - 1]["content"] if u["type"] == "tool_use"] if k else []
                assert b["tool_use_id"] in prev, b["tool_use_id"]


def check_chat_turns(body: dict[str, Any]) -> None:
    """Chat Completions: every assistant message's ``tool_calls`` are answered, in order, by the
    ``tool`` messages right after it; no ``tool`` message answers a call not made before it; ids
    are not reused."""
    msgs = body["messages"]
    seen: set[str] = set()
    for k, m in enumerate(msgs):
        if m["role"] == "assistant":
            assert m.get("content") is not None or m.get("tool_calls"), "an assistant message with neither content nor calls"
            calls = [c["id"] for c in m.get("tool_calls", [])]
            assert [x.get("tool_call_id") for x in msgs[k + 1:k + 1 + len(calls)]] == calls
            assert not seen & set(calls)
            seen |= set(calls)
        elif m["role"] == "tool":
            assert m["tool_call_id"] in seen, m["tool_call_id"]


def check_responses_turns(body: dict[str, Any]) -> None:
    """Responses: every ``function_call`` has one ``function_call_output`` and every output
    follows its call; call ids are not reused."""
    inp = body["input"]
    calls = [m["call_id"] for m in inp if m.get("type") == "function_call"]
    outputs = [m["call_id"] for m in inp if m.get("type") == "function_call_output"]
    assert len(set(calls)) == len(calls) and sorted(calls) == sorted(outputs)
    for k, m in enumerate(inp):
        if m.get("type") == "function_call_output":
            assert any(p.get("call_id") == m["call_id"] for p in inp[:k] if p.get("type") == "function_call")
