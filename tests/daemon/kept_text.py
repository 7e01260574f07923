"""The check every kept-text test makes: an answer that ended without being recorded whole (aborted,
failed while it streamed, refused by the log) keeps the visible text the user saw as one assistant
item, in every place a reader looks for it.

:func:`check_kept_text` holds a session whose first input ``"tell me about quokkas"`` (``r1``) got
such an answer, from a loopback server of a real wire protocol (``server``), and checks: the one
``model.failed`` carries the text; the view's items are the input and the text marked ``status``;
``lens log decode`` gives the same row as the events route; history search finds it under its id;
the next input's request (the server asked once before) sends it as the assistant's message between
the two user turns, and nothing of what never streamed; the view is the same after a restart.
:func:`check_nothing_kept` holds the opposite case: an answer that ended before any visible text
(reasoning streamed, a tool call begun) keeps nothing. :func:`new_session` makes the session both
start from."""

from __future__ import annotations

import json
from typing import Any, Callable

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import Reply, ScriptedServer
from .conftest import Daemon, run_lens, stop_daemon, wait_until

NEVER_SEEN = "never seen"  # (the tests' streams end with it after the cut: no request may carry it)


async def new_session(d: Daemon, client: str) -> tuple[str, str, str]:
    """A strong credential paired as ``client``, a project and a session in it: (token, project id,
    session id)."""
    token = await d.pair(client, strong=True)
    pid = (await d.project(token))["id"]
    return token, pid, (await d.session(token, pid))["id"]


def roles_and_texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A request's messages as (role, text), Anthropic's content blocks and Chat's strings alike,
    leaving out system and developer messages."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        if m.get("role") not in ("system", "developer"):
            out.append((m["role"], content or ""))
    return out


async def check_kept_text(d: Daemon, daemon_factory: Callable[..., Any], server: ScriptedServer, *,
                          token: str, pid: str, sid: str, config: dict[str, Any], text: str, status: str,
                          key: str, query: str, answer: Reply, asked: int = 1) -> dict[str, Any]:
    """Check that session ``sid``'s first answer was kept as ``text`` with ``status`` (``aborted``
    or ``failed``) everywhere (see the module docstring); ``key``: the protocol's list of messages
    in a request body (``messages``, ``input``); ``query``: a word of ``text`` found nowhere else
    in the project; ``answer``: what the server answers the next input; ``asked``: the requests
    the server had by then (the session's one, and any other sessions' before it). Returns the
    ``model.failed`` event (``lens log decode``'s row equals it). ``d`` is stopped: the restart
    runs on ``d.root`` with ``config``."""
    view = await d.wait_idle(token, sid)
    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert failed["body"]["partial_text"] == text, (failed["body"]["code"], len(failed["body"]["partial_text"]))
    items = [(it["role"], it["text"], it.get("status")) for it in view["items"]]
    assert items == [("user", "tell me about quokkas", None), ("assistant", text, status)], [i[:1] + i[2:] for i in items]
    assert view["items"][1]["context"] == "visible" and view["items"][1]["id"] == f"c{failed['seq']}"

    decoded = [json.loads(line) for line in
               (await run_lens(d.root, "log", "decode", "--data", str(d.data_dir), "--session", sid)).stdout.splitlines()]
    (row,) = [e for e in decoded if e["kind"] == "model.failed"]
    assert row["body"]["partial_text"] == text and row == failed

    async def found() -> list[dict[str, Any]]:
        r = await d.post("/history/search", token, {"projectId": pid, "query": query})
        assert r.status_code == 200, r.text
        return r.json()["results"]

    (hit,) = await wait_until(found, what="the kept text in history")
    assert (hit["contextItemId"], hit["role"], hit["sessionId"]) == (f"c{failed['seq']}", "assistant", sid)

    # Nothing asks again by itself; the next input's request carries the kept text as the
    # assistant's message, between the two user turns, without any call or reasoning.
    assert len(server.requests) == asked
    server.push(answer)
    await d.submit(token, sid, "r2", "go on")
    await d.wait_idle(token, sid)
    assert len(server.requests) == asked + 1
    sent = server.requests[asked].body[key]
    assert roles_and_texts(sent) == [("user", "tell me about quokkas"), ("assistant", text), ("user", "go on")]
    assert NEVER_SEEN not in json.dumps(sent)
    assert not [m for m in sent if m.get("type") in ("function_call", "reasoning") or m.get("tool_calls")]

    # Replay after a restart gives the same view.
    view = await d.view(token, sid)
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    again = await d2.view(token, sid)
    assert again["items"] == view["items"] and again["usage"] == view["usage"]
    assert [it.get("status") for it in again["items"]] == [None, status, None, None]
    return failed


async def check_nothing_kept(d: Daemon, server: ScriptedServer, *, token: str, pid: str, sid: str, code: str) -> None:
    """Check that session ``sid``'s first answer, which ended with ``code`` after reasoning
    (``pondering quokkas``) and a tool call begun but before any visible text, kept nothing: its
    ``model.failed`` holds no text, the view holds the input alone, history search finds no
    reasoning, and the next input's request (the server's second) sends the user's turns only."""
    view = await d.wait_idle(token, sid)
    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert (failed["body"]["code"], failed["body"]["partial_text"]) == (code, ""), failed
    assert [it["role"] for it in view["items"]] == ["user"], view["items"]
    r = await d.post("/history/search", token, {"projectId": pid, "query": "pondering"})
    assert r.status_code == 200 and r.json()["results"] == [], r.text

    server.push(message_stream(text="Small marsupials."))
    await d.submit(token, sid, "r2", "go on")
    await d.wait_idle(token, sid)
    assert [m["role"] for m in server.requests[1].body["messages"]] == ["user"]  # (two user turns, merged)
    assert "pondering" not in json.dumps(server.requests[1].body)
