"""Queries as a model or a person writes them, through the real daemon: ``POST /history/search``
and the ``history_search`` tool the agent calls (the faux model, the real tool path).

``OR``, ``AND`` and ``NOT`` written in capitals between two terms are operators; anywhere else
they are words, as is every other character of the FTS5 grammar (see docs/decisions.md, "Audit,
once more: history search and artifacts end to end")."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, error_of, run_tool

TEXTS = {
    "garden": "the quokka lives in the garden",
    "wombat": "a wombat digs in the garden",
    "both": "the quokka and the wombat meet",
    "or": "either this or that, not both",
}


async def _world(d: Daemon, strong: str) -> tuple[str, str, dict[str, str]]:
    """A project with one session whose inputs are :data:`TEXTS`; their context item ids by key."""
    pid = (await d.project(strong, "queries"))["id"]
    sid = (await d.session(strong, pid))["id"]
    for key, text in TEXTS.items():
        await d.submit(strong, sid, f"r-{key}", text)
        await d.wait_idle(strong, sid)
    items = {it["text"]: it["id"] for it in (await d.view(strong, sid))["items"] if it["role"] == "user"}
    return pid, sid, {key: items[text] for key, text in TEXTS.items()}


async def _users(d: Daemon, token: str, pid: str, query: str) -> set[str]:
    """The user items a search over HTTP finds."""
    resp = await d.post("/history/search", token, {"projectId": pid, "query": query, "limit": 100})
    assert resp.status_code == 200, (query, resp.text)
    return {r["contextItemId"] for r in resp.json()["results"] if r["role"] == "user"}


async def test_or_and_not_between_terms_are_operators(daemon: Daemon, strong: str, reader: str) -> None:
    pid, _sid, ids = await _world(daemon, strong)
    assert await _users(daemon, reader, pid, "quokka OR wombat") == {ids["garden"], ids["wombat"], ids["both"]}
    assert await _users(daemon, reader, pid, "quokka AND garden") == {ids["garden"]}
    assert await _users(daemon, reader, pid, "garden NOT wombat") == {ids["garden"]}
    assert await _users(daemon, reader, pid, "garden NOT wombat OR quokka") == set()
    assert await _users(daemon, reader, pid, "digs OR lives garden") == {ids["garden"], ids["wombat"]}
    assert await _users(daemon, reader, pid, '"the quokka" OR wom*') == {ids["garden"], ids["wombat"], ids["both"]}
    # lower case, or at an edge, they are words: "or", "not" must be in the item
    assert await _users(daemon, reader, pid, "this or that") == {ids["or"]}
    assert await _users(daemon, reader, pid, "OR") == {ids["or"]}
    assert await _users(daemon, reader, pid, "both NOT") == {ids["or"]}
    assert await _users(daemon, reader, pid, "NOT both") == {ids["or"]}
    assert await _users(daemon, reader, pid, '"or" "not"') == {ids["or"]}
    # both alternatives are highlighted in a snippet; an excluded term is not
    resp = await daemon.post("/history/search", reader, {"projectId": pid, "query": "quokka OR wombat NOT digs"})
    snippets = {r["contextItemId"]: r["snippet"] for r in resp.json()["results"]}
    assert snippets[ids["both"]] == "the [quokka] and the [wombat] meet"
    # operators with no term on one side are words too
    assert await _users(daemon, reader, pid, "AND") == {ids["both"]}
    assert await _users(daemon, reader, pid, "OR OR") == {ids["or"]}
    assert await _users(daemon, reader, pid, "NOT AND") == set()

async def test_the_history_search_tool_takes_the_same_operators(daemon: Daemon, strong: str) -> None:
    _pid, sid, ids = await _world(daemon, strong)
    body: dict[str, Any] = await run_tool(daemon, strong, sid, "t1", "history_search",
                                          {"query": "quokka OR wombat NOT history_search", "limit": 100})
    assert body["status"] == "ok", body
    # (the input asking for the call holds the query: "NOT history_search" leaves it out)
    found = {r["context_item_id"] for r in body["structured_content"]["results"] if r["role"] == "user"}
    assert found == {ids["garden"], ids["wombat"], ids["both"]}


async def test_the_history_tools_refuse_malformed_ids_as_the_routes_do(daemon: Daemon, strong: str) -> None:
    """``session_id: ""`` (models fill optional arguments so) found nothing, silently, where ``POST
    /history/search`` answers 400 ``INVALID_ARGUMENT``; ``history_read`` of ``bad id!`` was "no
    visible history item" where the route says the id is malformed."""
    _pid, sid, ids = await _world(daemon, strong)
    n = 0
    for name, args, field in [
        ("history_search", {"query": "quokka", "session_id": ""}, "session_id"),
        ("history_search", {"query": "quokka", "agent_id": "a b"}, "agent_id"),
        ("history_search", {"query": "quokka", "task_id": "x" * 201}, "task_id"),
        ("history_search", {"query": "quokka", "after_context_item_id": "c1!"}, "after_context_item_id"),
        ("history_read", {"context_item_id": "bad id!"}, "context_item_id"),
    ]:
        n += 1
        body = await run_tool(daemon, strong, sid, f"bad{n}", name, args)
        text = body["content"][0]["text"]
        assert body["status"] == "error" and text.startswith("INVALID_ARGUMENT: "), (args, body)
        assert field in text and "1 to 200 characters" in text and len(text) < 300, text
    # well formed, they work as the routes do: a session the project does not have is not found (as
    # on POST /history/search), an agent naming nothing finds nothing, an unknown item is not found
    body = await run_tool(daemon, strong, sid, "ok1", "history_search", {"query": "quokka", "session_id": "ses_none"})
    assert body["content"][0]["text"].startswith("SESSION_NOT_FOUND: "), body
    body = await run_tool(daemon, strong, sid, "ok4", "history_search", {"query": "quokka", "agent_id": "sub_none"})
    assert body["status"] == "ok" and body["structured_content"]["results"] == [], body
    body = await run_tool(daemon, strong, sid, "ok2", "history_read", {"context_item_id": ids["garden"]})
    assert body["status"] == "ok" and body["structured_content"]["eof"] is True, body
    body = await run_tool(daemon, strong, sid, "ok3", "history_read", {"context_item_id": "c999999"})
    assert body["content"][0]["text"].startswith("HISTORY_ITEM_NOT_FOUND: "), body


async def test_a_letter_the_index_holds_no_token_for_is_left_out_like_punctuation(daemon: Daemon, strong: str,
                                                                                  reader: str) -> None:
    """Python counts U+FF9E (a half-width voiced mark), U+037A or U+FE70 (an Arabic harakah's
    isolated form) as letters; SQLite's tokenizer finds no token in them (after NFKC). As a word
    of a query each was an empty phrase every result had to hold: ``quokka ﾞ`` found nothing.
    Now such a word is left out as ``!!!`` is, and a query of nothing else has no searchable words."""
    pid, _sid, ids = await _world(daemon, strong)
    for odd in ("\uff9e", "\u037a", "\ufe70", "\u19b0"):
        assert await _users(daemon, reader, pid, f"quokka {odd}") == {ids["garden"], ids["both"]}, hex(ord(odd))
        assert await _users(daemon, reader, pid, f'quokka "{odd}"') == {ids["garden"], ids["both"]}, hex(ord(odd))
        resp = await daemon.post("/history/search", reader, {"projectId": pid, "query": odd})
        assert resp.status_code == 400 and error_of(resp) == "INVALID_ARGUMENT", resp.text
        assert "no searchable words" in resp.json()["error"]["message"]
