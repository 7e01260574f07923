"""Request compilation and native tool names, as properties over generated contexts (F-MOD-2, F-MOD-3).

Hypothesis builds Working Contexts the way the session projection shapes them (system items at
any position, user inputs with text and images, responses of text, calls and native reasoning
blocks, results in any later position or missing, summaries; empty, blank and Unicode text; tool
ids with dots, spaces, non-ASCII, past 64 characters, differing only in what a native name
cannot hold), compiles them with :func:`runtime.providers.compile.prepare` and renders them
with each protocol's pure ``render``. What must hold for every one:

* the content keeps the items' order (a call's result right after its call, wherever the result
  item stood; a result whose call is not in the context left out);
* every call is paired with exactly one result in the shape its protocol demands (Anthropic: the
  ``tool_result`` blocks first in the very next user turn; roles alternating, starting with
  ``user``; no text block that is empty or blank);
* later system items become user blocks marked ``Lens instruction update:`` on Anthropic only;
* the request's items and tools are unchanged (compared with a deep copy);
* native tool names are valid, one per id within a request, and map back to the same id.

Each item's non-blank text carries a unique marker ``«<item id>»``: the order of the markers in
the rendered request is the order the request must keep.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import struct
import zlib
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from events import types as t
from projections.session_state import Item
from runtime.config import ModelConfig
from runtime.providers import anthropic_messages, openai_chat, openai_responses
from runtime.providers.base import ModelRequest, ProviderError
from runtime.providers.compile import INSTRUCTION_PREFIX, prepare
from runtime.providers.names import (
    CALL_ID_RE,
    CHAT_CALL_ID_MAX,
    CallIds,
    NATIVE_NAME_RE,
    ToolNames,
    alias_for,
    call_id_for,
    chat_call_id_for,
)

from .conftest import CLASSES, PROTOCOLS, Deltas, base_url
from .scripts import reply
from .servers.base import ScriptedServer
from .wire import check_anthropic_turns, check_chat_turns, check_responses_turns

# --------------------------------------------------------------------------- generated contexts


def png(shade: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" + bytes([shade, 0, 0]))) + chunk(b"IEND", b""))


IMAGES = {hashlib.sha256(b).hexdigest(): b for b in (png(s) for s in range(3))}
IMAGE_IDS = sorted(IMAGES)


async def load_image(artifact_id: str) -> bytes:  # (what the artifact store returns for a good artifact)
    return IMAGES[artifact_id]


# Tool ids: native ones, ids a native name cannot hold, and ids that differ only in such characters.
TOOL_IDS = ["read_file", "get_system_time", "mcp__github__search.issues", "mcp__github__search:issues",
            "mcp__github__search_issues", "mcp__srv__tool with spaces", "werkzeug_ß_ünïcode", "x" * 64, "x" * 65,
            "mcp__a__" + "very_long_segment_" * 6, "a.b", "a b", "a_b", "a-b", "Read_File", "read_file\n", "",
            "ツール", "mcp__s__" + "é" * 70]
ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]+")  # what the Messages API takes as a tool_use id
MARK = re.compile(r"«(c[0-9.]+)»")
plain = st.text(st.characters(blacklist_characters="«»", blacklist_categories=["Cs"]), max_size=12)
blank = st.sampled_from(["", " ", "\n\n", "\t \r\n"])


@st.composite
def texts(draw: Any, item_id: str) -> str:
    """The text of item ``item_id``: empty, blank, or its marker among other text."""
    if draw(st.integers(0, 5)) == 0:
        return draw(blank)
    return draw(plain) + f"«{item_id}»" + draw(plain)


@st.composite
def contexts(draw: Any) -> tuple[list[Item], list[str], list[dict[str, Any]]]:
    """(items, system strings, tools) as a session would send them."""
    items: list[Item] = []
    open_calls: list[str] = []  # calls without a result yet
    seq = 0
    n_calls = 0
    for _ in range(draw(st.integers(0, 14))):
        seq += 1
        iid = f"c{seq}"
        kind = draw(st.sampled_from(["system", "user", "user", "response", "response", "result", "result", "summary"]))
        if kind == "result" and not open_calls:
            kind = "lone" if draw(st.booleans()) else "user"
        if kind in ("system", "user", "summary"):
            text = draw(texts(iid))
            parts: list[t.ContentPart] = [t.TextPart(text)] if text else []
            if kind == "user" and draw(st.integers(0, 3)) == 0:
                parts += [t.ImagePart(i, "image/png") for i in draw(st.lists(st.sampled_from(IMAGE_IDS), min_size=1, max_size=2))]
                if draw(st.booleans()):
                    parts.append(t.TextPart(draw(blank)))
            items.append(Item(iid, kind, seq, text=text, parts=tuple(parts),
                              source=draw(st.sampled_from(["", "skill:review", "instruction"])) if kind == "system" else ""))
        elif kind == "response":
            text = draw(texts(iid)) if draw(st.booleans()) else ""
            first = len(items)
            n = 0
            if text:
                items.append(Item(iid, "assistant", seq, text=text))
                n += 1
            for _ in range(draw(st.integers(0 if text else 1, 3))):
                n_calls += 1
                # (ids as providers make them, OpenAI-compatible servers' included: unique in a session)
                call_id = draw(st.sampled_from([f"call_{n_calls}", f"toolu_{n_calls:024d}", f"call_{n_calls}-2",
                                                f"functions.read_file:{n_calls}", f"call {n_calls}", f"é{n_calls}",
                                                f"{n_calls}" + "x" * 90, f"call.{n_calls}", f"call:{n_calls}",
                                                f"{n_calls:064d}"]))
                args = draw(st.one_of(
                    st.dictionaries(plain, st.one_of(st.integers(), plain, st.booleans()), max_size=2).map(json.dumps),
                    st.sampled_from(["", "{", "[1]", '"x"', "NaN", '{"a": "\\ud800"}'])))
                items.append(Item(iid if n == 0 else f"{iid}.{n}", "tool_call", seq,
                                  call=t.ToolCall(call_id, draw(st.sampled_from(TOOL_IDS)), args)))
                open_calls.append(call_id)
                n += 1
            if draw(st.integers(0, 2)) == 0:
                blocks = [{"protocol": "anthropic", "block": {"type": "thinking", "thinking": "hm", "signature": "sig"}},
                          {"protocol": "openai-responses", "block": {"type": "reasoning", "id": "rs_1", "summary": [],
                                                                     "encrypted_content": "enc"}}]
                items[first].reasoning_blocks = draw(st.lists(st.sampled_from(blocks), min_size=1, max_size=2))
        else:  # a result: of an open call (in any later position), or lone (its call not in the context)
            if kind == "lone":
                call_id = f"gone_{seq}"
            else:
                call_id = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            text = draw(texts(iid))
            parts = [t.TextPart(text)] if text else []
            if draw(st.integers(0, 3)) == 0:
                parts.append(t.ImagePart(draw(st.sampled_from(IMAGE_IDS)), "image/png"))
            is_error = draw(st.booleans())
            items.append(Item(iid, "tool_result", seq, text=text, parts=tuple(parts), call_id=call_id,
                              status="error" if is_error else "ok", is_error=is_error))
    system = draw(st.lists(st.one_of(blank, plain.map(lambda s: s + "«c0»")), max_size=2))
    names = draw(st.lists(st.sampled_from(TOOL_IDS), unique=True, max_size=5))
    tools = [{"name": n, "description": draw(plain), "input_schema": {"type": "object", "properties": {}}} for n in names]
    return items, system, tools


def compile_all(items: list[Item], system: list[str], tools: list[dict[str, Any]], *, images: bool = True,
                explicit_cache: bool = True) -> dict[str, Any]:
    request = ModelRequest("m1", system, items, tools, None)

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        compiled = await prepare(request, load_image=load_image, images=images)
        out["anthropic"] = anthropic_messages.render(compiled, request, max_tokens=1024)[0]
        compiled = await prepare(request, load_image=load_image, images=images)
        out["openai-chat"] = openai_chat.render(compiled, request, explicit_cache=explicit_cache, ttl="30m")[0]
        compiled = await prepare(request, load_image=load_image, images=images)
        out["openai-responses"] = openai_responses.render(compiled, request, explicit_cache=explicit_cache, ttl="30m")[0]
        out["names"] = compiled.names
        return out

    return trio.run(run)


# --------------------------------------------------------------------------- what must hold


def marks(value: Any) -> list[str]:
    return MARK.findall(json.dumps(value, ensure_ascii=False))


def expected_order(items: list[Item], system: list[str]) -> tuple[list[str], list[str]]:
    """(leading markers, the rest in the order they must be sent): a call's result right after
    its response, a result whose call is not in the context left out."""
    leading = ["c0" for s in system if "«c0»" in s]
    rest: list[str] = []
    results = {it.call_id: it for it in items if it.role == "tool_result"}
    started = False
    i = 0
    while i < len(items):
        it = items[i]
        if it.role == "system" and not started:
            leading += MARK.findall(it.text)
            i += 1
            continue
        started = True
        if it.role in ("assistant", "tool_call"):
            calls = []
            while i < len(items) and items[i].role in ("assistant", "tool_call") and items[i].seq == it.seq:
                rest += MARK.findall(items[i].text)
                if items[i].call is not None:
                    calls.append(items[i].call.call_id)
                i += 1
            for c in calls:
                if c in results:
                    rest += MARK.findall(results[c].text)
            continue
        if it.role != "tool_result":
            rest += MARK.findall(it.text)
        i += 1
    return leading, rest


def later_system(items: list[Item]) -> list[Item]:
    first = next((k for k, it in enumerate(items) if it.role != "system"), len(items))
    return [it for it in items[first:] if it.role == "system"]


def check_anthropic(kw: dict[str, Any], items: list[Item], system: list[str]) -> None:
    leading, rest = expected_order(items, system)
    assert marks(kw.get("system", [])) == leading
    assert marks(kw["messages"]) == rest
    msgs = kw["messages"]
    check_anthropic_turns(kw)  # alternating, every call answered first in the next user turn
    for block in kw.get("system", []):
        assert block["type"] == "text" and block["text"].strip()

    def blocks(content: list[dict[str, Any]]) -> None:
        assert content, "an empty content list"
        for b in content:
            if b["type"] == "text":
                assert b["text"].strip(), f"a blank text block: {b!r}"
            elif b["type"] == "tool_result":
                blocks(b["content"])

    seen_ids: set[str] = set()
    for m in msgs:
        blocks(m["content"])
        if m["role"] != "assistant":
            continue
        uses = [b for b in m["content"] if b["type"] == "tool_use"]
        assert isinstance(m["content"], list)
        for u in uses:
            assert ANTHROPIC_ID.fullmatch(u["id"]), u["id"]
            assert u["id"] not in seen_ids
            seen_ids.add(u["id"])
            assert isinstance(u["input"], dict)
    assert json.dumps(kw).count('"cache_control"') <= 4  # (the API takes at most four breakpoints)
    # Later system instructions: one marked user block each, in place; leading ones only in system.
    marked = [b["text"] for m in msgs for b in m["content"] if b["type"] == "text" and b["text"].startswith(INSTRUCTION_PREFIX)]
    assert len(marked) == len(later_system(items))
    assert all(m["role"] == "user" for m in msgs for b in m["content"]
               if b["type"] == "text" and b["text"].startswith(INSTRUCTION_PREFIX))


def check_chat(kw: dict[str, Any], items: list[Item], system: list[str]) -> None:
    leading, rest = expected_order(items, system)
    msgs = kw["messages"]
    assert marks(msgs) == leading + rest
    assert INSTRUCTION_PREFIX not in json.dumps(msgs)
    assert json.dumps(msgs).count("prompt_cache_breakpoint") <= 4
    assert sum(m["role"] == "system" for m in msgs) == sum(1 for s in system if s) + sum(it.role == "system" for it in items)
    check_chat_turns(kw)  # every call answered right after it, no result without its call
    for m in msgs:
        calls = [c["id"] for c in m.get("tool_calls", [])] if m["role"] == "assistant" else []
        assert all(1 <= len(c) <= CHAT_CALL_ID_MAX for c in calls)  # (OpenAI refuses a longer id)
        content = m.get("content")
        if isinstance(content, list):
            assert content


def check_responses(kw: dict[str, Any], items: list[Item], system: list[str]) -> None:
    leading, rest = expected_order(items, system)
    inp = kw["input"]
    assert marks(inp) == leading + rest
    assert INSTRUCTION_PREFIX not in json.dumps(inp)
    assert json.dumps(inp).count("prompt_cache_breakpoint") <= 4
    assert sum(m.get("role") == "developer" for m in inp) == sum(1 for s in system if s) + sum(it.role == "system" for it in items)
    calls = [m["call_id"] for m in inp if m.get("type") == "function_call"]
    assert all(1 <= len(c) <= 64 for c in calls)  # (the API refuses a longer call_id)
    check_responses_turns(kw)  # one output per call, after it


def wire_names(protocol: str, kw: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the names of the request's tools, the names its calls are sent under)."""
    if protocol == "anthropic":
        return ([x["name"] for x in kw.get("tools", [])],
                [b["name"] for m in kw["messages"] for b in m["content"] if b["type"] == "tool_use"])
    if protocol == "openai-chat":
        return ([x["function"]["name"] for x in kw.get("tools", [])],
                [c["function"]["name"] for m in kw["messages"] for c in m.get("tool_calls", [])])
    return ([x["name"] for x in kw.get("tools", [])], [m["name"] for m in kw["input"] if m.get("type") == "function_call"])


@settings(max_examples=200)
@given(contexts(), st.booleans())
def test_compiled_requests_keep_order_pairing_and_names(ctx, images):
    items, system, tools = ctx
    before = copy.deepcopy((items, system, tools))
    out = compile_all(items, system, tools, images=images)
    assert (items, system, tools) == before  # what is persisted (and offered) is never changed
    check_anthropic(out["anthropic"], items, system)
    check_chat(out["openai-chat"], items, system)
    check_responses(out["openai-responses"], items, system)
    names: ToolNames = out["names"]
    internal = [x["name"] for x in tools]
    called = [it.call.name for it in items if it.call is not None]
    for protocol in ("anthropic", "openai-chat", "openai-responses"):
        offered, sent = wire_names(protocol, out[protocol])
        assert all(NATIVE_NAME_RE.fullmatch(n) for n in offered + sent)
        assert len(set(offered)) == len(offered)
        assert [names.internal(n) for n in offered] == internal
        assert [names.internal(n) for n in sent] == called
    # one native name per id, within the request
    assert len({alias_for(i) for i in internal + called}) == len(set(internal + called))


@given(st.lists(st.one_of(st.sampled_from(TOOL_IDS), st.text(max_size=80)), unique=True, max_size=12), st.randoms())
def test_native_names_are_valid_stable_and_map_back(ids, rnd):
    shuffled = list(ids)
    rnd.shuffle(shuffled)
    forward, backward = ToolNames(ids), ToolNames(shuffled)
    for i in ids:
        native = forward.native(i)
        assert NATIVE_NAME_RE.fullmatch(native) and len(native) <= 64
        assert native == backward.native(i) == alias_for(i)  # the same whatever the load order
        assert forward.internal(native) == i
        assert (native == i) == bool(NATIVE_NAME_RE.fullmatch(i))  # native ids travel unchanged
    assert len({forward.native(i) for i in ids}) == len(ids)


@given(st.one_of(st.sampled_from(TOOL_IDS), st.text(min_size=1, max_size=80)).filter(lambda i: alias_for(i) != i),
       st.booleans())
def test_an_id_named_like_another_ids_alias_is_refused_in_either_order(other, reverse):
    ids = [other, alias_for(other)]
    with pytest.raises(ProviderError) as info:
        ToolNames(reversed(ids) if reverse else ids)
    assert info.value.code == "TOOL_NAME_COLLISION"


@given(st.lists(st.one_of(st.text(max_size=80), st.from_regex(CALL_ID_RE, fullmatch=True)), unique=True, max_size=12))
def test_call_ids_go_to_anthropic_and_responses_in_the_form_they_take(ids):
    sent = [call_id_for(i) for i in ids]
    assert all(CALL_ID_RE.fullmatch(s) for s in sent)
    assert len(set(sent)) == len(sent)  # (ids unique in a session stay unique on the wire)
    assert sent == [call_id_for(i) for i in ids]  # a pure function: a call and its result agree
    assert all((s == i) == bool(CALL_ID_RE.fullmatch(i)) for s, i in zip(sent, ids))


@given(st.lists(st.text(min_size=1, max_size=80), unique=True, max_size=12))
def test_call_ids_go_to_chat_completions_at_most_40_characters_long(ids):
    sent = [chat_call_id_for(i) for i in ids]
    assert all(1 <= len(s) <= CHAT_CALL_ID_MAX for s in sent)
    assert len(set(sent)) == len(sent)
    assert sent == [chat_call_id_for(i) for i in ids]
    assert all((s == i) == (len(i) <= CHAT_CALL_ID_MAX) for s, i in zip(sent, ids))  # shorter ones as they are


@given(st.lists(st.one_of(st.text(min_size=1, max_size=80), st.from_regex(CALL_ID_RE, fullmatch=True)), unique=True,
                max_size=12), st.booleans(), st.randoms())
def test_a_request_sends_each_call_id_under_one_of_its_own(ids, chat, rnd):
    wire = chat_call_id_for if chat else call_id_for
    ids = list(dict.fromkeys(ids + [wire(i) for i in ids]))  # (an alias may also be another call's id)
    table = CallIds(ids, chat=chat)
    sent = [table.wire(i) for i in ids]
    assert len(set(sent)) == len(ids)
    if chat:
        assert all(1 <= len(s) <= CHAT_CALL_ID_MAX for s in sent)
    else:
        assert all(CALL_ID_RE.fullmatch(s) for s in sent)
    assert all(s == i for s, i in zip(sent, ids) if wire(i) == i)  # ids sent as they are keep themselves
    rnd.shuffle(ids)
    assert [CallIds(ids, chat=chat).wire(i) for i in ids] == [table.wire(i) for i in ids]  # whatever the order


@settings(max_examples=6)
@given(contexts())
def test_the_sdk_clients_send_generated_requests_as_compiled(ctx):
    """A few generated requests go through the official SDK clients to the loopback servers: the
    SDKs take them, and what reaches the server is what was compiled."""
    items, system, tools = ctx
    request = ModelRequest("m1", system, items, tools, None)
    before = copy.deepcopy((items, system, tools))
    expected = compile_all(items, system, tools, explicit_cache=False)  # (as these models are configured)

    async def run() -> list[Any]:
        async with trio.open_nursery() as nursery:
            server = ScriptedServer()
            await server.start(nursery)
            for protocol in PROTOCOLS:
                provider = CLASSES[protocol](f"p-{protocol}", base_url=base_url(protocol, server), api_key="test-key",
                                             models={"m1": ModelConfig(id="m1", images=True)}, load_image=load_image,
                                             max_retries=0)
                called = [x["name"] for x in tools[:1]]
                server.push(reply(protocol, text="ok", calls=[("call_new", alias_for(n), {"a": 1}) for n in called]))
                try:
                    result = await provider.stream(request, Deltas())
                    assert result.text == "ok"
                    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [(n, {"a": 1}) for n in called]
                finally:
                    await provider.aclose()
            nursery.cancel_scope.cancel()
        return server.bodies

    bodies = dict(zip(PROTOCOLS, trio.run(run)))
    assert (items, system, tools) == before
    normal = lambda value: json.loads(json.dumps(value))  # noqa: E731
    assert bodies["anthropic"]["messages"] == normal(expected["anthropic"]["messages"])
    assert bodies["anthropic"].get("system") == normal(expected["anthropic"].get("system"))
    assert bodies["openai-chat"]["messages"] == normal(expected["openai-chat"]["messages"])
    assert bodies["openai-responses"]["input"] == normal(expected["openai-responses"]["input"])
    for protocol in PROTOCOLS:
        offered, sent = wire_names(protocol, bodies[protocol])
        assert all(NATIVE_NAME_RE.fullmatch(n) for n in offered + sent)
