"""A third pass over SPEC section 4 as a user sees it: sessions of the real actor and supervisor
whose model is served over loopback by the real SDK clients, sent answers that compatible servers
give and the earlier passes did not send."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from events import types as t
from runtime.actor import GetState, Submit, WaitIdle
from runtime.providers.base import ProviderError
from runtime.working_context import Compact
from tools.base import ToolResult, ToolSpec
from tools.registry import builtin_tools

from .conftest import Ctx, Deltas, image_part, tiny_png
from .scripts import reply
from .servers import anthropic as an
from .servers import openai_chat as oc
from .servers.base import Reply
from .test_actor import events_of, runtime


def _chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
    return (None, {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})


def _lookup_tool(seen: list[Any]) -> ToolSpec:
    async def run(args: dict[str, Any], ctx: Any) -> ToolResult:
        seen.append(args)
        return ToolResult.text(f"no entry for {args['path']}")

    return ToolSpec("lookup", "Look a path up.",
                    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}, run)


def _chat_call_with_arguments(arguments: Any, *, text: str = "", name: str = "read_file") -> Reply:
    """A Chat stream whose one tool call carries ``arguments`` as given: TGI and llama.cpp's
    server (in one of its modes) send the JSON object itself, not its text."""
    frames = [_chunk({"role": "assistant", "content": ""})]
    if text:
        frames.append(_chunk({"content": text}))
    frames += [_chunk({"tool_calls": [{"index": 0, "id": "call_obj", "type": "function",
                                       "function": {"name": name, "arguments": arguments}}]}),
               _chunk({}, "tool_calls"), (None, "[DONE]")]
    return Reply(events=frames)


async def test_chat_tool_arguments_sent_as_a_json_object_are_the_calls_arguments(server, make, tmp_path):
    """A compatible server that sends a call's ``arguments`` as a JSON object (not the JSON text
    OpenAI sends): the call runs with those arguments, the log records them as JSON text, and the
    next request sends them back as text, as the protocol has them. Every such answer failed as a
    malformed stream (``TypeError: sequence item 0: expected str instance, dict found``), so the
    model of such a server could call no tool."""
    provider = make("openai-chat")
    seen: list[Any] = []
    server.push(_chat_call_with_arguments({"path": "nowhere/ünïcode.txt"}, text="Reading.", name="lookup"),
                reply("openai-chat", text="It is not there.", rid="r2"))
    async with runtime(tmp_path / "data", provider, tools=builtin_tools([_lookup_tool(seen)])) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("look it up")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        state = await sup.call(sid, GetState())
        evs = await events_of(sup, sid)
    assert [e.kind for e in evs if e.kind in ("model.responded", "model.failed")] == ["model.responded"] * 2
    [first, _] = [e.event for e in evs if e.kind == "model.responded"]
    [call] = first.tool_calls
    assert (call.call_id, call.name) == ("call_obj", "lookup")
    assert json.loads(call.arguments) == {"path": "nowhere/ünïcode.txt"}
    assert seen == [{"path": "nowhere/ünïcode.txt"}]  # the tool ran with them
    [finished] = [e.event for e in evs if e.kind == "tool.finished"]
    assert finished.status == "ok" and finished.content[0].text == "no entry for nowhere/ünïcode.txt"
    assert state.status == "idle" and state.agents["main"].items[-1].text == "It is not there."
    [sent] = [c for m in server.requests[1].body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert isinstance(sent["function"]["arguments"], str)
    assert json.loads(sent["function"]["arguments"]) == {"path": "nowhere/ünïcode.txt"}


@pytest.mark.parametrize("arguments", [[1, 2], 5, True])
async def test_chat_tool_arguments_of_another_json_value_are_answered_as_arguments_that_are_no_object(
        arguments, server, make):
    """A JSON value that is no object is the text of that value: the call is kept (the tool
    runner answers it ``INVALID_ARGUMENT``, as arguments ``"[1, 2]"`` sent as text are), never a
    ``TypeError`` of the stream."""
    provider = make("openai-chat")
    server.push(_chat_call_with_arguments(arguments))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    [call] = result.tool_calls
    assert json.loads(call.arguments) == arguments and result.stop_reason == "tool_use"


async def test_chat_tool_arguments_as_an_object_after_text_pieces_join_as_text(server, make):
    """Fragments of one call may mix the forms (text, then an object): each is its JSON text, in
    order; what they make together is the call's arguments as the model sent them."""
    provider = make("openai-chat")
    frames = [_chunk({"role": "assistant", "content": ""}),
              _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "read_file", "arguments": ""}}]}),
              _chunk({"tool_calls": [{"index": 0, "function": {"arguments": {"path": "a"}}}]}),
              _chunk({}, "tool_calls"), (None, "[DONE]")]
    server.push(Reply(events=frames))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert [json.loads(c.arguments) for c in result.tool_calls] == [{"path": "a"}]


def _anthropic_blocks(*blocks: tuple[str, Any]) -> Reply:
    """An Anthropic stream of these content blocks: ``("text", [pieces])``, ``("thinking",
    [pieces])`` (signed), ``("tool_use", (id, name, arguments text))``."""
    events: list[tuple[str | None, Any]] = []

    def ev(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    ev("message_start", message={"id": "msg_9", "type": "message", "role": "assistant", "model": "m", "content": [],
                                 "stop_reason": None, "stop_sequence": None,
                                 "usage": {"input_tokens": 10, "output_tokens": 1}})
    uses = False
    for index, (kind, body) in enumerate(blocks):
        if kind == "tool_use":
            uses = True
            call_id, name, args = body
            ev("content_block_start", index=index, content_block={"type": "tool_use", "id": call_id, "name": name, "input": {}})
            ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": args})
        elif kind == "thinking":
            ev("content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""})
            for piece in body:
                ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
            ev("content_block_delta", index=index, delta={"type": "signature_delta", "signature": f"sig{index}"})
        else:
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in body:
                ev("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        ev("content_block_stop", index=index)
    ev("message_delta", delta={"stop_reason": "tool_use" if uses else "end_turn", "stop_sequence": None},
       usage={"output_tokens": 9})
    ev("message_stop")
    return Reply(events=events)


async def test_anthropic_text_blocks_of_one_answer_are_paragraphs_not_glued_words(server, make, tmp_path):
    """An Anthropic answer holds its text in blocks: with interleaved thinking, text, thinking,
    then text again; text after a ``tool_use``. They were joined as one string with nothing
    between them (``"I will look.Found it."``), live and in the log. Each text block after the
    first that has text now starts a new paragraph (``\\n\\n``), live as in the answer, so what
    streamed is what is recorded; the thinking of several blocks is joined so too, as a Responses
    answer's reasoning summaries are."""
    provider = make("anthropic")
    server.push(_anthropic_blocks(("text", ["I will ", "look."]), ("thinking", ["Which file?"]),
                                  ("text", []),  # (an empty block: no paragraph of its own)
                                  ("text", ["Reading it now."]), ("thinking", ["Then the time."]),
                                  ("tool_use", ("toolu_1", "get_system_time", "{}")),
                                  ("text", ["Asked."])),
                reply("anthropic", text="Done.", rid="r2"))
    deltas: list[Any] = []
    async with runtime(tmp_path / "data", provider) as sup:
        # (each delta with the requests the server had by then: the first answer's came while
        # it had one, before the answer was recorded and the next request asked)
        sup.deps.on_delta = lambda sid, agent, d: deltas.append((len(server.requests), d))
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart("what time is it?")]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
        evs = await events_of(sup, sid)
    [first, _] = [e.event for e in evs if e.kind == "model.responded"]
    assert first.text == "I will look.\n\nReading it now.\n\nAsked."
    assert first.reasoning == "Which file?\n\nThen the time."
    live = [d for n, d in deltas if n == 1]  # the first answer's deltas, up to its model.responded
    assert "".join(d.text for d in live if d.kind == "text") == first.text  # live as recorded
    assert "".join(d.text for d in live if d.kind == "reasoning") == first.reasoning
    assert "".join(d.text for n, d in deltas if n == 2) == "Done."  # (and the second answer's after it)
    [call] = first.tool_calls
    assert call.name == "get_system_time"
    # the thinking blocks go back signed and unchanged, each with its own text
    sent = server.requests[1].body["messages"][1]["content"]
    assert [b.get("thinking") for b in sent if b["type"] == "thinking"] == ["Which file?", "Then the time."]
    assert [b["text"] for b in sent if b["type"] == "text"] == ["I will look.\n\nReading it now.\n\nAsked."]


@pytest.mark.parametrize(("blocks", "text"), [
    ([["\n\n"], ["Done."]], "\n\nDone."),  # (white space before a call: no paragraph after it)
    ([["One."], [" "], ["Two."]], "One. \n\nTwo."),  # (a white-space block: no paragraph of its own)
    ([["Hello"], ["\n\n"], ["World"]], "Hello\n\n\n\nWorld"),
    ([["One."], ["  ", "\nTwo", "."]], "One.  \n\n\nTwo."),  # (the break before the first that shows)
    ([["One."], [], ["Two."]], "One.\n\nTwo."),
    ([["Only."]], "Only."),
])
async def test_anthropic_a_block_begins_a_paragraph_only_after_text_that_shows(blocks, text, server, make):
    """A block's paragraph break goes before its first character that is not white space, live
    as recorded; a block of white space only gets none (it got one of its own, and ``["Hello",
    "\\n\\n", "World"]`` came out with six newlines between the words)."""
    provider = make("anthropic")
    parts: list[tuple[str, Any]] = []
    for n, pieces in enumerate(blocks):
        parts.append(("text", pieces))
        if n == 0:
            parts.append(("tool_use", ("toolu_1", "get_system_time", "{}")))
    server.push(_anthropic_blocks(*parts))
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert result.text == text and deltas.text() == text


# Anthropic's refusal of a request whose input and ``max_tokens`` together pass the window, as
# the Messages API words it (HTTP 400, ``invalid_request_error``): the input alone may fit.
ANTHROPIC_WINDOW = ("input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, "
                    "decrease input length or `max_tokens` and try again")


async def test_anthropics_input_and_max_tokens_past_the_window_is_context_too_long(server, make):
    """It was ``BAD_REQUEST`` (its words are none of "prompt is too long", "context window",
    "maximum context"…): a request it could not fix, where the window is what refused it."""
    provider = make("anthropic", max_retries=0)
    server.push(an.error(400, ANTHROPIC_WINDOW))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("a long prompt").request(), Deltas())
    assert (info.value.code, info.value.retryable, info.value.status) == ("CONTEXT_TOO_LONG", False, 400)
    assert ANTHROPIC_WINDOW in info.value.message, info.value.message


async def test_a_summarizing_request_anthropic_refuses_for_its_window_is_sent_again_cut(server, make, tmp_path):
    """A compaction's summarizing request refused so is asked once more at half the size (as for
    "prompt is too long"); it failed the compaction instead."""
    provider = make("anthropic", max_retries=0)
    big = "BIG-INPUT " + "z" * (4 * 40_000)
    server.push(reply("anthropic", text="Hello."), an.error(400, ANTHROPIC_WINDOW),
                reply("anthropic", text="SUMMARY-OF-IT", rid="r3"))
    async with runtime(tmp_path / "data", provider) as sup:
        sid = await sup.create_session("p1")
        await sup.call(sid, Submit("req1", [t.TextPart(big)]))
        with trio.fail_after(30):
            await sup.call(sid, WaitIdle())
            result = await sup.call(sid, Compact())
        state = await sup.call(sid, GetState())
    assert len(server.bodies) == 3
    refused, sent = (json.dumps(b) for b in server.bodies[1:])
    assert big in refused and big not in sent and len(sent) < len(refused) // 2
    assert result["summary"].startswith("SUMMARY-OF-IT")
    assert [it.role for it in state.agents["main"].items] == ["user", "assistant", "summary"]


def _magistral_stream() -> Reply:
    """Mistral's reasoning models (Magistral) stream ``delta.content`` as a list of chunks: a
    ``thinking`` chunk holding text chunks, then the answer, as text chunks or as plain text."""
    def thinking(text: str) -> dict[str, Any]:
        return {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": text}]}]}

    return Reply(events=[_chunk({"role": "assistant", "content": ""}), _chunk(thinking("It's a greeting")),
                         _chunk(thinking(", I should greet back.")),
                         _chunk({"content": [{"type": "text", "text": "Hello"}]}),
                         _chunk({"content": [{"type": "reference", "reference_ids": [1]}]}),  # (no text: nothing)
                         _chunk({"content": " there!"}), _chunk({}, "stop"), (None, "[DONE]")])


async def test_chat_content_streamed_as_a_list_of_chunks_is_text_and_thinking(server, make):
    """A Chat ``delta.content`` that is a list of content chunks (Mistral's Magistral models):
    ``text`` chunks are the answer's text, a ``thinking`` chunk's text chunks its reasoning, live
    as recorded; chunks of other types hold no text. Every such answer failed as a malformed
    stream (``delta.content is list, not text``)."""
    provider = make("openai-chat")
    server.push(_magistral_stream())
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert (result.text, result.reasoning, result.stop_reason) == (
        "Hello there!", "It's a greeting, I should greet back.", "end_turn")
    assert deltas.text() == result.text and deltas.text("reasoning") == result.reasoning


@pytest.mark.parametrize("content", [[5], ["text"], [{"type": "text", "text": 5}],
                                     [{"type": "thinking", "thinking": [{"type": "text", "text": None}]}],
                                     [{"type": "thinking", "thinking": None}]])
async def test_chat_content_chunks_that_are_no_chunks_are_a_malformed_stream_naming_them(content, server, make):
    provider = make("openai-chat", max_retries=0)
    server.push(Reply(events=[_chunk({"role": "assistant", "content": ""}), _chunk({"content": content}),
                              _chunk({}, "stop"), (None, "[DONE]")]))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "PROVIDER_ERROR" and "malformed stream" in info.value.message
    assert "delta.content" in info.value.message, info.value.message


@pytest.mark.parametrize("name", [None, "message"])
async def test_an_anthropic_stream_without_event_names_is_read_by_each_events_type(name, server, make):
    """Proxies that pass an Anthropic stream on with its ``data:`` lines only (no ``event:``, or
    the SSE default ``message``): each event's JSON names its ``type``, which the SDK reads only
    from ``event:``. It skipped every frame, and the whole answer failed as "the stream ended
    before its stop_reason" (retryable, and the same again when asked again). Read by ``type``,
    it is the answer it was, a call and an error event included."""
    provider = make("anthropic", max_retries=0)
    whole = reply("anthropic", text=["Hi ", "there."], calls=[("toolu_1", "read_file", {"path": "a.txt"})])
    whole.events = [(name, data) for _, data in whole.events]
    failing = reply("anthropic", text=["cut"])
    failing.events = [(name, data) for _, data in failing.events[:3]] + [
        (name, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
    server.push(whole, failing)
    deltas = Deltas()
    result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert (result.text, result.stop_reason, deltas.text()) == ("Hi there.", "tool_use", "Hi there.")
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("toolu_1", "read_file", {"path": "a.txt"})]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (100, 20)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("again").request(), Deltas())
    assert info.value.code == "OVERLOADED" and "Overloaded" in info.value.message, info.value.message


# Mistral's API refusing ``stream_options`` (its 422 body, as it sends it).
MISTRAL_422 = {"object": "error", "message": {"detail": [{"type": "extra_forbidden",
                                                          "loc": ["body", "stream_options", "include_usage"],
                                                          "msg": "Extra inputs are not permitted", "input": True}]},
               "type": "invalid_request_error", "param": None, "code": None}


async def test_a_chat_server_that_refuses_stream_options_is_asked_without_them(server, make):
    """Lens asks a Chat stream for its usage (``stream_options.include_usage``), which Mistral's
    API refuses (422 ``extra_forbidden`` naming ``stream_options``): every request of such a
    provider failed ``BAD_REQUEST``. The request is asked again at once without them, and so is
    every later request of that provider; usage the server sends all the same is read, and a
    count it does not send stays unknown."""
    provider = make("openai-chat")
    server.push(Reply(422, MISTRAL_422), reply("openai-chat", text="Bonjour.", rid="r1"),
                _magistral_stream())
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "Bonjour." and result.usage.input_tokens == 100
    second = await provider.stream(Ctx().user("hi again").request(), Deltas())
    assert second.text == "Hello there!" and second.usage.input_tokens is None  # (none sent: unknown)
    assert [("stream_options" in b) for b in server.bodies] == [True, False, False]
    assert all(b["stream"] is True for b in server.bodies)


@pytest.mark.parametrize(("status", "body"), [
    (422, {"object": "error", "message": "messages: Extra inputs are not permitted", "type": "invalid_request_error"}),
    (400, {"error": {"message": "tools: unsupported", "type": "invalid_request_error"}}),
])
async def test_a_refusal_that_does_not_name_stream_options_is_not_asked_again(status, body, server, make):
    provider = make("openai-chat")
    server.push(Reply(status, body), reply("openai-chat", text="never asked"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("hi").request(), Deltas())
    assert info.value.code == "BAD_REQUEST" and info.value.status == status
    assert len(server.requests) == 1 and "stream_options" in server.bodies[0]



MISTRAL_ORDER = {"object": "error", "message": "Unexpected role 'user' after role 'tool'",
                 "type": "invalid_request_message_order", "param": None, "code": "3230"}


async def test_a_chat_server_that_refuses_a_turn_right_after_tool_results_gets_a_bridging_answer(server, make):
    """Mistral's API takes no ``user`` (or ``system``) message right after a ``tool`` one, which
    Lens sends when tool results bring images (the user message naming the call), when an input
    steers after a tool round, or when instructions come after the results. It refused every
    such request (400 "Unexpected role 'user' after role 'tool'"), and every later request of the
    session held the same turns. The request is asked again at once with a short assistant turn
    between the results and what follows, and so is every later request of that provider; what
    is recorded does not change."""
    provider = make("openai-chat")
    server.push(Reply(400, MISTRAL_ORDER), *[reply("openai-chat", text=f"Answer {n}.", rid=f"r{n}") for n in (1, 2, 3)])
    ctx = (Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one")
           .user("and stop there"))
    items = [(it.role, it.text) for it in ctx.items]
    assert (await provider.stream(ctx.request(), Deltas())).text == "Answer 1."
    assert (await provider.stream(ctx.request(), Deltas())).text == "Answer 2."
    # a request with no message right after tool results goes as it is
    plain = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one")
    assert (await provider.stream(plain.request(), Deltas())).text == "Answer 3."
    roles = [[m["role"] for m in b["messages"]] for b in server.bodies]
    assert roles[0] == ["system", "user", "assistant", "tool", "user"]
    assert roles[1] == roles[2] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert roles[3] == ["system", "user", "assistant", "tool"]
    bridge = server.bodies[1]["messages"][4]
    assert bridge == {"role": "assistant", "content": "(tool results received)"}, bridge
    assert [(it.role, it.text) for it in ctx.items] == items


async def test_another_order_refusal_is_not_asked_again(server, make):
    provider = make("openai-chat")
    server.push(Reply(400, {**MISTRAL_ORDER, "message": "Unexpected role 'tool' after role 'user'"}),
                reply("openai-chat", text="never"))
    ctx = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one").user("more")
    with pytest.raises(ProviderError) as info:
        await provider.stream(ctx.request(), Deltas())
    assert info.value.code == "BAD_REQUEST" and len(server.requests) == 1



async def test_the_bridging_answer_goes_before_a_tools_images_and_later_instructions(server, make, artifacts):
    provider = make("openai-chat", load_image=artifacts.load)
    server.push(Reply(400, {**MISTRAL_ORDER, "message": "Unexpected role 'system' after role 'tool'"}),
                reply("openai-chat", text="Seen."))
    ctx = (Ctx().user("look").response("", ("call_1", "view_image", {"path": "a.png"}), ("call_2", "read_file", {"path": "b"}))
           .result("call_1", "", image_part(artifacts.store)).result("call_2", "two").system("now review"))
    assert (await provider.stream(ctx.request(), Deltas())).text == "Seen."
    sent = server.bodies[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "assistant", "user", "system"]
    assert sent[5]["content"] == "(tool results received)"
    assert "call_1" in json.dumps(sent[6]["content"]) and "image_url" in json.dumps(sent[6]["content"])


# --------------------------------------------------------------------------- through `lens serve`


async def test_through_lens_serve_a_tgi_call_runs_claudes_paragraphs_are_kept_and_mistral_answers(tmp_path, nursery):
    """``lens serve`` with three providers at a loopback server, configured as a user writes them:
    an ``openai-chat`` one (a TGI-like server that sends the arguments object itself), an
    ``anthropic`` one, and an ``openai-chat`` one speaking as Mistral's API. The first session's
    ``read_file`` call runs in the workspace (the real executor) and the file's text reaches the
    model; the Anthropic session's answer of two text blocks around its thinking shows as two
    paragraphs in the session view; the Mistral session's request, refused for its
    ``stream_options``, is asked again without them, its ``view_image`` call runs, the request
    with the image after the tool result, refused for that order, is asked again with a bridging
    turn, and its answer of content chunks is recorded (usage neither answer sent stays unknown)."""
    from pathlib import Path

    from ..daemon.conftest import serving
    from .servers.base import ScriptedServer

    server = ScriptedServer()
    url = await server.start(nursery)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({
        "providers": [{"id": "tgi", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "maxRetries": 0,
                       "models": [{"id": "m"}]},
                      {"id": "claude", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0,
                       "models": [{"id": "m"}]},
                      {"id": "mistral", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "maxRetries": 0,
                       "models": [{"id": "m", "images": True}]}],
        "defaultModel": "tgi/m"}))
    async with serving(tmp_path) as (_, d):
        token = await d.pair("c1", strong=True, via="cli")
        project = await d.project(token)
        (Path(project["workspace"]) / "notes.txt").write_text("the notes say 42\n")
        # Chat: the arguments as an object
        sid = (await d.session(token, project["id"]))["id"]
        server.push(_chat_call_with_arguments({"path": "notes.txt"}, text="Reading."),
                    reply("openai-chat", text="They say 42.", rid="r2"))
        await d.submit(token, sid, "r1", "what do the notes say?")
        view = await d.wait_idle(token, sid)
        events = await d.events(token, sid)
        assert [e["kind"] for e in events if e["kind"] in ("model.responded", "model.failed")] == ["model.responded"] * 2
        [finished] = [e["body"] for e in events if e["kind"] == "tool.finished"]
        assert finished["status"] == "ok", finished
        assert "the notes say 42" in json.dumps(server.requests[1].body)  # the tool's result, sent
        assert view["items"][-1]["text"] == "They say 42."
        # Anthropic: text, thinking, text
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": "claude/m"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        server.push(_anthropic_blocks(("text", ["Let me think."]), ("thinking", ["Hm."]), ("text", ["It is 42."])))
        await d.submit(token, sid, "r1", "what is it?")
        view = await d.wait_idle(token, sid)
        texts = [it.get("text") for it in view["items"] if it.get("role") == "assistant"]
        assert texts == ["Let me think.\n\nIt is 42."], view["items"]
        # Mistral: stream_options refused, then a Magistral answer of content chunks
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": "mistral/m"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        (Path(project["workspace"]) / "dot.png").write_bytes(tiny_png())
        before = len(server.requests)
        server.push(Reply(422, MISTRAL_422),
                    oc.chat_stream(text="Looking.", calls=[("call_v1", "view_image", {"path": "dot.png"})]),
                    Reply(400, MISTRAL_ORDER), _magistral_stream())
        await d.submit(token, sid, "r1", "what is in dot.png?")
        view = await d.wait_idle(token, sid)
        events = await d.events(token, sid)
        assert [e["kind"] for e in events if e["kind"] in ("model.responded", "model.failed")] == ["model.responded"] * 2
        [finished] = [e["body"] for e in events if e["kind"] == "tool.finished"]
        assert finished["status"] == "ok", finished
        responded = [e["body"] for e in events if e["kind"] == "model.responded"][-1]
        assert (responded["text"], responded["reasoning"]) == ("Hello there!", "It's a greeting, I should greet back.")
        sent = server.requests[before:]
        assert [("stream_options" in rq.body) for rq in sent] == [True, False, False, False]
        assert [[m["role"] for m in rq.body["messages"]][-3:] for rq in sent[2:]] == [
            ["assistant", "tool", "user"], ["tool", "assistant", "user"]]  # (the image after the tool result)
        assert view["usage"]["inputTokens"] is None and view["usage"]["unreported"]["inputTokens"] == 2, view["usage"]



# A FastAPI (pydantic) server's 422 for a message too long: it echoes the refused value, here a
# user's words that name ``stream_options``, which the server does not refuse.
ECHOING_422 = {"detail": [{"type": "string_too_long", "loc": ["body", "messages", 1, "content"],
                           "msg": "String should have at most 10 characters",
                           "input": "why does my client send stream_options?"}]}


async def test_a_refusal_that_echoes_stream_options_in_a_value_is_not_asked_again(server, make):
    """Only what the refusal says (its ``loc``, ``message``, ``msg``, ``type``) can name
    ``stream_options``; a value it echoes (``input``) names what the user wrote. It was asked
    again without them, and every later request went without them (usage unknown after)."""
    provider = make("openai-chat")
    server.push(Reply(422, ECHOING_422), reply("openai-chat", text="Fine.", rid="r2"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("why does my client send stream_options?").request(), Deltas())
    assert (info.value.code, info.value.status) == ("BAD_REQUEST", 422)
    assert len(server.requests) == 1
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "Fine." and result.usage.input_tokens == 100
    assert [("stream_options" in b) for b in server.bodies] == [True, True]


async def test_a_refusal_that_echoes_the_order_message_in_a_value_is_not_bridged(server, make):
    """The bridging turn is for a refusal whose own words are Mistral's; a value a refusal
    echoes (``input``) that holds them is what was sent, not why it was refused."""
    provider = make("openai-chat")
    echo = {"detail": [{"type": "string_too_long", "loc": ["body", "messages", 4, "content"],
                        "msg": "String should have at most 10 characters",
                        "input": "Unexpected role 'user' after role 'tool'"}]}
    server.push(Reply(422, echo), reply("openai-chat", text="never"))
    ctx = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one").user("more")
    with pytest.raises(ProviderError) as info:
        await provider.stream(ctx.request(), Deltas())
    assert (info.value.code, info.value.status) == ("BAD_REQUEST", 422) and len(server.requests) == 1


async def test_what_one_model_refuses_changes_only_that_models_requests(server, make):
    """One provider (a gateway) fronts many models, and each refuses on its own: m1 refusing
    ``stream_options`` and a turn right after tool results changes m1's later requests only;
    m2's go as they went. After a restart (a fresh provider), m1's first request is refused
    once each way and asked again, and then goes as the live provider's did, body for body."""
    from runtime.config import ModelConfig

    provider = make("openai-chat", models={"m1": ModelConfig(id="m1"), "m2": ModelConfig(id="m2")})
    server.push(Reply(422, MISTRAL_422), Reply(400, MISTRAL_ORDER),
                *[reply("openai-chat", text=f"Answer {n}.", rid=f"r{n}") for n in (1, 2, 3)])
    ctx = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one").user("more")
    assert (await provider.stream(ctx.request("m1"), Deltas())).text == "Answer 1."
    assert (await provider.stream(ctx.request("m2"), Deltas())).text == "Answer 2."
    assert (await provider.stream(ctx.request("m1"), Deltas())).text == "Answer 3."
    sent = [(b["model"], "stream_options" in b, [m["role"] for m in b["messages"]][-2:]) for b in server.bodies]
    assert sent == [("m1", True, ["tool", "user"]), ("m1", False, ["tool", "user"]),
                    ("m1", False, ["assistant", "user"]), ("m2", True, ["tool", "user"]),
                    ("m1", False, ["assistant", "user"])]
    live = server.bodies[-1]
    restarted = make("openai-chat", models={"m1": ModelConfig(id="m1"), "m2": ModelConfig(id="m2")})
    server.push(Reply(422, MISTRAL_422), Reply(400, MISTRAL_ORDER),
                *[reply("openai-chat", text=f"Answer {n}.", rid=f"r{n}") for n in (4, 5)])
    assert (await restarted.stream(ctx.request("m1"), Deltas())).text == "Answer 4."
    assert (await restarted.stream(ctx.request("m1"), Deltas())).text == "Answer 5."
    after = server.bodies[5:]
    assert [("stream_options" in b, [m["role"] for m in b["messages"]][-2:]) for b in after] == [
        (True, ["tool", "user"]), (False, ["tool", "user"]), (False, ["assistant", "user"]),
        (False, ["assistant", "user"])]
    assert after[2] == live and after[3] == live


async def test_two_requests_refused_for_their_order_at_once_are_both_bridged(server, make):
    """Two requests of one model in flight, both sent without the bridging turn and both
    refused for it: the one refused after the other had already marked the model is asked
    again too (it was decided by the mark, not by what it sent, and failed ``BAD_REQUEST``).
    The first refusal is held until the other request has been answered."""
    provider = make("openai-chat")
    held = trio.Event()
    server.push(Reply(400, MISTRAL_ORDER, gate=held), Reply(400, MISTRAL_ORDER),
                reply("openai-chat", text="Answer.", rid="r1"), reply("openai-chat", text="Answer.", rid="r2"))
    ctx = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one").user("more")
    texts: list[str] = []

    async def ask() -> None:
        texts.append((await provider.stream(ctx.request(), Deltas())).text)
        held.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(ask)
    assert texts == ["Answer.", "Answer."]
    roles = [[m["role"] for m in b["messages"]][-2:] for b in server.bodies]
    assert sorted(roles) == [["assistant", "user"]] * 2 + [["tool", "user"]] * 2


@pytest.mark.parametrize("name", [None, "message"])
def test_an_unnamed_anthropic_frame_named_by_its_type_keeps_its_raw_lines(name):
    """The frame renamed by its data's ``type`` is the frame the SDK decoded, but for its name:
    its ``data``, ``id``, ``retry`` and the raw lines it was read from (the SDK's ``raw``)."""
    from anthropic._streaming import ServerSentEvent

    from runtime.providers.anthropic_messages import named_by_type

    data = json.dumps({"type": "message_stop"})
    lines = [f"data: {data}"] if name is None else [f"event: {name}", f"data: {data}"]
    renamed = named_by_type(ServerSentEvent(event=name, data=data, id="7", retry=5, raw=lines))
    assert (renamed.event, renamed.data, renamed.id, renamed.retry, renamed.raw) == ("message_stop", data, "7", 5, lines)


# A vLLM (pydantic) server's refusal of a message too long: its ``message`` is text, and the text
# holds the refused value, here a user's words that name ``stream_options``.
ECHOING_TEXT_400 = {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
                    "message": "1 validation error for ChatCompletionRequest\nmessages.1.content\n  String should "
                               "have at most 10 characters [type=string_too_long, input_value='why does my client "
                               "send stream_options?', input_type=str]"}


async def test_a_text_refusal_that_echoes_stream_options_leaves_the_model_unmarked(server, make):
    """A refusal whose text names ``stream_options`` only in the value it echoes: the request is
    asked again without them, that is refused too, and that refusal is raised; the model is not
    marked, so the next request still asks for its usage."""
    provider = make("openai-chat")
    server.push(Reply(400, ECHOING_TEXT_400), Reply(400, ECHOING_TEXT_400), reply("openai-chat", text="Fine.", rid="r2"))
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("why does my client send stream_options?").request(), Deltas())
    assert (info.value.code, info.value.status) == ("BAD_REQUEST", 400)
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "Fine." and result.usage.input_tokens == 100
    assert [("stream_options" in b) for b in server.bodies] == [True, False, True]


async def test_an_openai_refusal_naming_stream_options_in_param_is_asked_without_them(server, make):
    """OpenAI's own refusal shape names the field in ``param`` alone: asked again without them,
    and the model marked (its next request goes without them too)."""
    provider = make("openai-chat")
    refusal = {"error": {"message": "Unknown parameter.", "type": "invalid_request_error",
                         "param": "stream_options", "code": "unknown_parameter"}}
    server.push(Reply(400, refusal), reply("openai-chat", text="One.", rid="r1"), reply("openai-chat", text="Two.", rid="r2"))
    assert (await provider.stream(Ctx().user("hi").request(), Deltas())).text == "One."
    assert (await provider.stream(Ctx().user("again").request(), Deltas())).text == "Two."
    assert [("stream_options" in b) for b in server.bodies] == [True, False, False]


async def test_a_bridged_retry_refused_all_the_same_leaves_the_model_unbridged(server, make):
    """A refusal with Mistral's order words, asked again with the bridging turn and refused all
    the same: that refusal is raised, and the model's next request goes without the turn."""
    provider = make("openai-chat")
    server.push(Reply(400, MISTRAL_ORDER), Reply(400, MISTRAL_ORDER), reply("openai-chat", text="Answer.", rid="r1"))
    ctx = Ctx().user("hi").response("", ("call_1", "read_file", {"path": "a"})).result("call_1", "one").user("more")
    with pytest.raises(ProviderError) as info:
        await provider.stream(ctx.request(), Deltas())
    assert (info.value.code, info.value.status) == ("BAD_REQUEST", 400)
    assert (await provider.stream(ctx.request(), Deltas())).text == "Answer."
    assert [[m["role"] for m in b["messages"]][-2:] for b in server.bodies] == [
        ["tool", "user"], ["assistant", "user"], ["tool", "user"]]
