"""Tools at their edges through a real session: the faux model calls them, the daemon runs them
(the file tools in a real executor process over gRPC), and each result is read from the log.
What the tool modules' own tests pin is not redone; these are edges found only this way."""

from __future__ import annotations

from .conftest import Daemon, run_tool


async def setup(d: Daemon) -> tuple[str, str]:
    token = await d.pair("edges-client", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def test_revert_call_quotes_a_long_call_id_cut_and_names_a_bad_one(daemon: Daemon) -> None:
    # A call id of 5,000 characters came back whole in NOTHING_TO_REVERT's message (and so in
    # the log and the next model request); other tools cut what they quote at 80 characters.
    token, sid = await setup(daemon)
    long_id = "c" * 5000
    body = await run_tool(daemon, token, sid, "r1", "revert_call", {"call_id": long_id})
    assert body["error_code"] == "NOTHING_TO_REVERT"
    text = body["content"][0]["text"]
    assert text == f"NOTHING_TO_REVERT: call '{'c' * 79}… changed no file in this session (or was reverted)", text
    for i, args in enumerate(({"call_id": 5}, {"call_id": ""}, {})):
        body = await run_tool(daemon, token, sid, f"r2-{i}", "revert_call", args)
        assert body["error_code"] == "INVALID_ARGUMENT", body
        assert body["content"][0]["text"].startswith("INVALID_ARGUMENT: call_id must be a non-empty string"), body
    body = await run_tool(daemon, token, sid, "r3", "revert_call", {"call_id": "x", "paths": ["a"]})
    assert body["content"][0]["text"] == "INVALID_ARGUMENT: revert_call does not take 'paths'; it takes {\"call_id\": \"...\"}"


async def test_an_unknown_argument_is_named_cut_at_80_characters(daemon: Daemon) -> None:
    # A model's misspelt argument of 6,000 characters came back whole from the history and web
    # tools' "does not take" (and so into the log and every later request); the time tools and
    # the file tools cut it as every message cuts what it quotes.
    token, sid = await setup(daemon)
    name = "z" * 6000
    for i, (tool, args) in enumerate((("history_search", {"query": "x"}), ("history_read", {"context_item_id": "c1"}),
                                      ("web_fetch", {"url": "https://example.com/"}), ("web_search", {"query": "x"}))):
        body = await run_tool(daemon, token, sid, f"r{i}", tool, {**args, name: 1})
        assert body["error_code"] == "INVALID_ARGUMENT", body
        assert body["content"][0]["text"] == f"INVALID_ARGUMENT: {tool} does not take '{'z' * 79}…", body
    # two unknown names are both named, in order
    body = await run_tool(daemon, token, sid, "r-two", "history_read", {"context_item_id": "c1", "b": 1, "a": 2})
    assert body["content"][0]["text"] == "INVALID_ARGUMENT: history_read does not take 'a', 'b'"
