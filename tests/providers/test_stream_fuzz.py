"""Model streams that misbehave, by fuzzing (F-MOD-1): the official SDK clients against the
loopback servers, whose side hypothesis writes.

*Chunking.* A valid stream of each protocol, written with LF, CRLF or CR line endings, with or
without the space after ``data:``, with keep-alive comments between events, with or without
``id:`` lines (and a frame of ``retry:`` alone), and cut into chunks
at any byte (inside a ``data:`` line, inside a UTF-8 character): the client reads each chunk
before the next is sent (``Reply.chunks``), and the answer it commits — text, reasoning, tool
calls with their ids and arguments, stop reason, usage — is the one the stream gives unchunked.

*Mutations.* An event dropped, duplicated, moved or made up; a field of the wrong type; a tool
call's arguments for a call never opened; a call's id or name, a stop reason or a response id
that is no text; content after the end; an end that never comes; a
connection dropped mid-event; an error in the stream or as the answer, in the provider's error
shape or not, with any ``Retry-After``; huge deltas. The request then ends in an answer whose
every field the log can hold, or in one :class:`ProviderError` with a stable code whose message
names the provider (and no key, traceback or path); within the timeouts, with the retries
configured; and the provider serves the next request. Through a session (real actor, store and
log): one ``model.responded`` or ``model.failed`` per request, a log that verifies, and an answer
to the next input.
"""

from __future__ import annotations

import copy
import email.utils
import json
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from events import types as t
from events.reader import LogReader
from runtime.actor import GetState, Submit, WaitIdle
from runtime.config import ModelConfig
from runtime.logcli import verify_log
from runtime.providers.base import ModelResult, ProviderError

from .conftest import CLASSES, PROTOCOLS, Ctx, Deltas, base_url
from .scripts import reply
from .servers.base import Reply, ScriptedServer
from .test_actor import events_of, runtime

KEY = "sk-fuzz-Q7mZ2xV9cB4nL8kJ3hG6fD1s"
Frames = list[tuple[str | None, Any]]
# Every code a failed model request may carry (runtime/providers/sdk.py).
CODES = {"AUTH_FAILED", "PERMISSION_DENIED", "MODEL_NOT_FOUND", "CONTEXT_TOO_LONG", "REQUEST_TOO_LARGE",
         "BAD_REQUEST", "QUOTA_EXCEEDED", "RATE_LIMITED", "OVERLOADED", "TIMEOUT", "CONNECTION_FAILED",
         "PROVIDER_ERROR"}


def wire(frames: Frames, *, eol: str = "\n", comments: frozenset[int] = frozenset(), space: bool = True,
         ids: bool = False) -> bytes:
    """``frames`` as an SSE body: JSON as UTF-8 (not ``\\u`` escapes), ``eol`` line endings, a
    ``: keep-alive`` comment before each frame whose index is in ``comments``; ``ids``: each
    frame has an ``id:`` line, and the stream opens with a frame of ``retry:`` alone."""
    sp = " " if space else ""
    out = [f"retry:{sp}3000{eol}{eol}"] if ids else []
    for i, (name, data) in enumerate(frames):
        if i in comments:
            out.append(f": keep-alive{eol}{eol}")
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        out.append((f"id:{sp}{i}{eol}" if ids else "") + (f"event:{sp}{name}{eol}" if name else "")
                   + f"data:{sp}{text}{eol}{eol}")
    return "".join(out).encode()


def cut(body: bytes, points: list[int]) -> list[bytes]:
    if not body:
        return []
    edges = [0, *sorted({p % len(body) for p in points} - {0}), len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:])]


def answer(result: ModelResult) -> tuple[Any, ...]:
    return (result.text, result.reasoning, [(c.call_id, c.name, c.arguments) for c in result.tool_calls],
            result.stop_reason, result.usage, result.response_id)


async def ask(protocol: str, replies: list[Reply], *, max_retries: int = 0, then: bool = True,
              timeout: float = 30.0) -> tuple[Any, Deltas, ScriptedServer, Any]:
    """One request of a provider of ``protocol`` answered by ``replies``: (its result or
    ProviderError, its live deltas, the server, the result of a normal request after it or
    ``None``). Anything else raised is the test's failure."""
    async with trio.open_nursery() as nursery:
        server = ScriptedServer()
        await server.start(nursery)
        provider = CLASSES[protocol](f"p-{protocol}", base_url=base_url(protocol, server), api_key=KEY,
                                     models={"m1": ModelConfig(id="m1")}, max_retries=max_retries, timeout=timeout)
        server.push(*replies)
        deltas = Deltas()
        try:
            with trio.fail_after(60):  # (a bound only: what is drawn ends within seconds)
                try:
                    outcome: Any = await provider.stream(Ctx().user("hi").request(), deltas)
                except ProviderError as exc:
                    outcome = exc
                after = None
                if then:
                    server.replies.clear()
                    # (more than one: a huge first answer makes the next request compact the context first)
                    server.push(*(reply(protocol, text="next answer") for _ in range(3)))
                    after = await provider.stream(Ctx().user("again").request(), Deltas())
        finally:
            await provider.aclose()
            nursery.cancel_scope.cancel()
    return outcome, deltas, server, after


def run(coro: Any, *args: Any, **kw: Any) -> Any:
    # (On the real clock: an autojump clock jumps while the run waits for a thread, say the SDK's
    # name lookup, and so fires deadlines nothing missed. The Retry-After values drawn are those
    # the SDKs do not wait for, or milliseconds; their backoff is then about a second a retry.)
    return trio.run(partial(coro, *args, **kw))


def assert_well_ended(protocol: str, outcome: Any) -> None:
    """An answer the log can hold, or one ProviderError that says what and where."""
    if isinstance(outcome, ModelResult):
        outcome = outcome.well_formed()  # (as the actor records it)
        recorded = t.ModelResponded(text=outcome.text, reasoning=outcome.reasoning, tool_calls=outcome.tool_calls,
                                    stop_reason=outcome.stop_reason, usage=outcome.usage,
                                    provider_response_id=outcome.response_id,
                                    reasoning_blocks=outcome.reasoning_blocks, diagnostics=outcome.diagnostics)
        raw = msgspec.msgpack.encode(recorded)
        assert msgspec.msgpack.decode(raw, type=t.ModelResponded) == recorded  # typed as the log reads it
        assert all(c.name and c.call_id for c in outcome.tool_calls)
        return
    assert isinstance(outcome, ProviderError), outcome
    assert outcome.code in CODES and isinstance(outcome.retryable, bool), outcome.code
    message = outcome.message
    assert message.startswith(f"provider 'p-{protocol}'"), message
    assert KEY[:8] + KEY[8:16] not in message and "Traceback" not in message and ".py" not in message, message
    assert outcome.usage is None or isinstance(outcome.usage, t.Usage)


# ----------------------------------------------------------------------------- chunking

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@st.composite
def streams(draw: Any, protocol: str) -> tuple[Reply, dict[str, Any]]:
    texts = draw(st.lists(TEXT, min_size=1, max_size=4))
    reasoning = draw(st.lists(TEXT, max_size=2))
    calls = [(f"call_{i}", name, {"path": value}) for i, (name, value) in
             enumerate(draw(st.lists(st.tuples(st.sampled_from(["read_file", "get_system_time"]), TEXT), max_size=2)))]
    return reply(protocol, text=texts, reasoning=reasoning, calls=calls), {"texts": texts, "calls": calls}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(deadline=None, max_examples=20)
@given(data=st.data())
def test_an_answer_is_the_same_however_its_stream_is_cut(protocol, data):
    scripted, drawn = data.draw(streams(protocol))
    eol = data.draw(st.sampled_from(["\n", "\r\n", "\r"]))
    frames = scripted.events
    comments = frozenset(data.draw(st.sets(st.integers(0, len(frames)), max_size=4)))
    body = wire(frames, eol=eol, comments=comments, space=data.draw(st.booleans()), ids=data.draw(st.booleans()))
    points = data.draw(st.lists(st.integers(1, 10**6), min_size=1, max_size=60))
    whole, whole_deltas, _, _ = run(ask, protocol, [Reply(chunks=[wire(frames)])], then=False)
    assert isinstance(whole, ModelResult), whole
    assert whole.text == "".join(drawn["texts"])
    assert [(c.call_id, json.loads(c.arguments)) for c in whole.tool_calls] == [(i, a) for i, _, a in drawn["calls"]]
    chunked, deltas, server, _ = run(ask, protocol, [Reply(chunks=cut(body, points))], then=False)
    assert isinstance(chunked, ModelResult), chunked
    assert answer(chunked) == answer(whole)
    assert chunked.reasoning_blocks == whole.reasoning_blocks
    assert deltas.text() == whole_deltas.text() and deltas.text("reasoning") == whole_deltas.text("reasoning")


# ----------------------------------------------------------------------------- mutations


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    value = copy.copy(value)
    value[path[0]] = _set(value[path[0]], path[1:], new)
    return value


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2), max_leaves=4)


def _stray_arguments(protocol: str) -> tuple[str | None, Any]:
    """A tool call's arguments for a call (block, index) that was never opened."""
    if protocol == "openai-chat":
        return None, {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 7, "function": {"arguments": '{"x": 1}'}}]}, "finish_reason": None}]}
    if protocol == "anthropic":
        return "content_block_delta", {"type": "content_block_delta", "index": 7,
                                       "delta": {"type": "input_json_delta", "partial_json": '{"x": 1}'}}
    return "response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                      "sequence_number": 99, "item_id": "fc_never", "output_index": 7,
                                                      "delta": '{"x": 1}'}


def _error_frame(protocol: str, shaped: bool, words: str) -> tuple[str | None, Any]:
    if not shaped:
        return ("error" if protocol == "anthropic" else None), words
    if protocol == "anthropic":
        return "error", {"type": "error", "error": {"type": "overloaded_error", "message": words}}
    if protocol == "openai-chat":
        return None, {"error": {"message": words, "type": "server_error", "code": None}}
    return "error", {"type": "error", "sequence_number": 99, "code": "server_error", "message": words, "param": None}


def _error_reply(protocol: str, status: int, shape: str, words: str, retry_after: tuple[str, str] | None) -> Reply:
    headers = dict([retry_after]) if retry_after else {}
    if shape == "provider":
        body: bytes = json.dumps({"type": "error", "error": {"type": "api_error", "message": words}} if protocol == "anthropic"
                                 else {"error": {"message": words, "type": "server_error", "param": None, "code": None}}).encode()
        return Reply(status, chunks=[body], content_type="application/json", headers=headers)
    body = {"html": f"<html><body><h1>{status}</h1>{words}</body></html>", "text": words, "empty": "",
            "json": json.dumps({"detail": words}), "broken": '{"error": {"message": '}[shape].encode()
    return Reply(status, chunks=[body], content_type="text/html" if shape == "html" else "application/json", headers=headers)


RETRY_AFTER = st.one_of(
    st.none(),
    st.tuples(st.just("retry-after"), st.sampled_from(["0", "-1", "-86400", "121", "86400", "99999999999999999999",
                                                       "1e400", "nan", "inf", "-inf", "soon", ""])),
    st.tuples(st.just("retry-after"), st.integers(-10**6, 10**6).map(
        lambda s: email.utils.formatdate(1_700_000_000 + s, usegmt=True))),  # a date long past
    st.tuples(st.just("retry-after-ms"), st.sampled_from(["0", "-5", "5", "nan", "1e12", "x"])),
)


@st.composite
def mutated(draw: Any, protocol: str, huge: tuple[int, ...] = (64 * 1024, 1024 * 1024, 4 * 1024 * 1024)
            ) -> tuple[str, list[Reply]]:
    frames = reply(protocol, text=draw(st.lists(TEXT, min_size=1, max_size=3)), reasoning=draw(st.lists(TEXT, max_size=1)),
                   calls=[("call_1", "read_file", {"path": "a"})]).events
    frames = copy.deepcopy(frames)
    n = len(frames)
    i = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from(["drop", "duplicate", "move", "unknown", "mistyped", "mistyped id", "stray arguments",
                                 "after the end", "no end", "dropped connection", "error event", "http error",
                                 "huge delta"]))
    close_early = False
    if kind == "drop":
        frames.pop(i)
    elif kind == "duplicate":
        frames.insert(i, copy.deepcopy(frames[i]))
    elif kind == "move":
        frames.insert(draw(st.integers(0, n - 1)), frames.pop(i))
    elif kind == "unknown":
        frames.insert(i, ("weird.event", {"type": "weird.event", "index": 0, "delta": {"type": "weird"}}))
    elif kind == "mistyped":
        name, data = frames[i]
        if isinstance(data, dict):
            frames[i] = (name, _set(data, draw(st.sampled_from(_leaves(data))), draw(JSON)))
    elif kind == "mistyped id":  # a call's id or name, a stop reason, a response id
        named = [(j, path) for j, (_, d) in enumerate(frames) if isinstance(d, dict) for path in _leaves(d)
                 if path and path[-1] in ("id", "call_id", "name", "stop_reason")]
        j, path = draw(st.sampled_from(named))
        frames[j] = (frames[j][0], _set(frames[j][1], path, draw(JSON.filter(lambda v: not isinstance(v, str)))))
    elif kind == "stray arguments":
        frames.insert(i, _stray_arguments(protocol))
    elif kind == "after the end":
        frames += [copy.deepcopy(f) for f in frames if isinstance(f[1], dict) and "delta" in json.dumps(f[1])][:3]
    elif kind == "no end":
        frames = frames[:i]
    elif kind == "error event":
        frames.insert(i, _error_frame(protocol, draw(st.booleans()), draw(TEXT)))
    elif kind == "huge delta":
        size = draw(st.sampled_from(huge))
        big = reply(protocol, text=["é" * (size // 2)]).events
        frames = big
    if kind == "http error":
        status = draw(st.sampled_from([400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504, 529]))
        shape = draw(st.sampled_from(["provider", "html", "text", "empty", "json", "broken"]))
        first = _error_reply(protocol, status, shape, draw(TEXT), draw(RETRY_AFTER))
        return kind, [first, first, reply(protocol, text="after the error")]
    body = wire(frames)
    if kind == "dropped connection":
        body, close_early = body[:draw(st.integers(1, len(body) - 1))], True
    chunks = cut(body, draw(st.lists(st.integers(1, 10**6), max_size=8)))
    return kind, [Reply(chunks=chunks, close_early=close_early)]


def _before_the_end(protocol: str, scripted: Reply) -> bytes:
    """The body of an "after the end" reply without the frames added after its last one."""
    last = {"openai-chat": b"data: [DONE]\n\n", "anthropic": b"event: message_stop\n",
            "openai-responses": b"event: response.completed\n"}[protocol]
    body = b"".join(scripted.chunks or [])
    end = body.index(last)
    return body[:body.index(b"\n\n", end) + 2]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(deadline=None, max_examples=60)
@given(data=st.data())
def test_a_misbehaving_stream_ends_in_an_answer_or_one_error_and_the_provider_serves_on(protocol, data):
    kind, replies = data.draw(mutated(protocol))
    max_retries = data.draw(st.integers(0, 1)) if kind == "http error" else 0
    outcome, deltas, server, after = run(ask, protocol, replies, max_retries=max_retries)
    assert_well_ended(protocol, outcome)
    if kind == "after the end":  # (what comes after the stream's last event is no part of the answer)
        whole, whole_deltas, _, _ = run(ask, protocol, [Reply(chunks=[_before_the_end(protocol, replies[0])])], then=False)
        assert isinstance(outcome, ModelResult) and answer(outcome) == answer(whole)
        assert deltas.text() == whole_deltas.text()  # (nor streamed live as part of it)
    assert all(isinstance(d.text, str) for d in deltas)
    assert len(server.requests) <= max_retries + 2  # (the request, its retries, the next one)
    assert isinstance(after, ModelResult) and after.text == "next answer"


@settings(deadline=None, max_examples=12)
@given(data=st.data())
def test_a_misbehaving_stream_fails_or_answers_one_request_of_a_session_which_answers_the_next(data, tmp_path_factory):
    protocol = data.draw(st.sampled_from(PROTOCOLS))
    kind, replies = data.draw(mutated(protocol, huge=(64 * 1024,)))
    outcome = trio.run(_session, protocol, replies, tmp_path_factory.mktemp("fuzz"))
    first, second, status, problems = outcome
    assert len(first) == 1 and first[0].kind in ("model.responded", "model.failed"), [e.kind for e in first]
    if first[0].kind == "model.failed":
        assert first[0].event.code in CODES and first[0].event.message.startswith(f"provider 'p-{protocol}'")
    assert [e.event.text for e in second if e.kind == "model.responded"][-1] == "next answer"
    assert status == "idle" and problems == []


async def _session(protocol: str, replies: list[Reply], root: Path) -> tuple[list, list, str, list]:
    """The first of ``replies`` answers a session's first input (tool calls in it run, then the
    server answers "done"); a normal answer then answers its second. (model events of each, its
    status, what ``lens log verify`` finds)"""
    async with trio.open_nursery() as nursery:
        server = ScriptedServer()
        await server.start(nursery)
        provider = CLASSES[protocol](f"p-{protocol}", base_url=base_url(protocol, server), api_key=KEY,
                                     models={"m1": ModelConfig(id="m1")}, max_retries=0, timeout=30)
        server.push(*replies[:1], reply(protocol, text="done"))
        try:
            async with runtime(root / "data", provider) as sup:
                sid = await sup.create_session("p1")
                with trio.fail_after(120):
                    await sup.call(sid, Submit("r1", [t.TextPart("hi")]))
                    await sup.call(sid, WaitIdle())
                    first = [e for e in await events_of(sup, sid) if e.kind in ("model.responded", "model.failed")]
                    server.replies.clear()
                    # (more than one: a huge first answer makes the next request compact the context first)
                    server.push(*(reply(protocol, text="next answer") for _ in range(3)))
                    await sup.call(sid, Submit("r2", [t.TextPart("again")]))
                    await sup.call(sid, WaitIdle())
                state = await sup.call(sid, GetState())
                evs = await events_of(sup, sid)
        finally:
            await provider.aclose()
            nursery.cancel_scope.cancel()
    seen = {e.seq for e in first}
    second = [e for e in evs if e.kind in ("model.responded", "model.failed") and e.seq not in seen]
    with LogReader(root / "data") as reader:
        problems = list(verify_log(reader))
    # (a first answer with tool calls is followed by "done": the first request's own event is the first)
    return first[:1], second, state.status, problems
