"""An answer with neither text nor tool calls (reasoning alone, or nothing at all) through a real
daemon: its turn has an item that says so with its stop reason, live and after a restart, and the
next request does not send it as an empty assistant message (which the providers refuse)."""

from __future__ import annotations

from typing import Any

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .conftest import stop_daemon
from .keyleaks import loop_config
from .test_context_http import _session

KEY_ENV = "LENS_TEST_EMPTY_KEY"


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def _turns(items: list[dict[str, Any]]) -> list[tuple[str, str, str | None, str | None]]:
    return [(it["role"], it.get("text", ""), it.get("status"), it.get("stopReason")) for it in items]


async def test_an_answer_with_neither_text_nor_calls_has_an_item_and_is_not_sent_back(
        daemon_factory, nursery, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-empty-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    config = loop_config(url, KEY_ENV)
    d = await daemon_factory(config=config)
    token, _pid, sid = await _session(d)
    loop.push(oc.chat_stream(reasoning=["nothing to say"]), oc.chat_stream(text="", finish="content_filter"),
              oc.chat_stream(text="now something"))
    await d.submit(token, sid, "r1", "say nothing")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "filter this")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r3", "and now?")
    view = await d.wait_idle(token, sid)
    turns = [("user", "say nothing", None, None), ("assistant", "", "empty", "end_turn"),
             ("user", "filter this", None, None), ("assistant", "", "empty", "content_filter"),
             ("user", "and now?", None, None), ("assistant", "now something", None, None)]
    assert _turns(view["items"]) == turns, view["items"]
    responded = [e for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert [f"c{e['seq']}" for e in responded] == [it["id"] for it in view["items"] if it["role"] == "assistant"]
    # The requests after them: the inputs, no assistant message without content (Chat refuses
    # one with neither content nor tool calls).
    for body, inputs in ((loop.bodies[1], ["say nothing", "filter this"]),
                         (loop.bodies[2], ["say nothing", "filter this", "and now?"])):
        said = [m for m in body["messages"] if m["role"] != "system"]
        assert [m["role"] for m in said] == ["user"] * len(inputs), said
        assert [_text(m) for m in said] == inputs
    # In the Working Context (it is the turn's place in the conversation), shown as such.
    context = (await d.get(f"/sessions/{sid}/context", token)).json()
    assert context["workingItemIds"] == [it["id"] for it in view["items"]], context

    # The same after a restart.
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert _turns((await d2.view(token, sid))["items"]) == turns
