"""Tools at their edges through a real session: the faux model calls them, the daemon runs them
(the file tools in a real executor process over gRPC), and each result is read from the log.
What the tool modules' own tests pin is not redone; these are edges found only this way."""

from __future__ import annotations

import json

from tests.files.sample_images import png_of_size
from tools.files.errors import MAX_IMAGE_BYTES as MAX_IMAGE

from .conftest import Daemon, finished, run_tool, wait_until


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


async def test_sleep_at_its_limits_and_an_abort_of_the_longest(daemon: Daemon) -> None:
    token, sid = await setup(daemon)
    body = await run_tool(daemon, token, sid, "r0", "sleep_milliseconds", {"milliseconds": 0})
    assert not body["is_error"]
    assert body["structured_content"]["start_unix_ms"] <= body["structured_content"]["end_unix_ms"]
    body = await run_tool(daemon, token, sid, "r1", "sleep_milliseconds", {"milliseconds": 2147483648})
    assert body["content"][0]["text"] == "INVALID_ARGUMENT: milliseconds must be from 0 to 2147483647, got 2147483648"
    await daemon.submit(token, sid, "r2", '/tool sleep_milliseconds {"milliseconds": 2147483647}')

    async def sleeping() -> bool:
        return any(e["kind"] == "tool.started" and e["body"]["name"] == "sleep_milliseconds"
                   and "2147483647" in e["body"]["arguments"] for e in await daemon.events(token, sid))

    await wait_until(sleeping, what="the longest sleep started")
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await daemon.wait_idle(token, sid)
    ended = finished(await daemon.events(token, sid))[-1]
    assert (ended["status"], ended["error_code"]) == ("interrupted", "ABORTED"), ended
    body = await run_tool(daemon, token, sid, "r3", "get_system_time", {})  # the session goes on
    assert not body["is_error"]


async def test_view_image_at_5_mib_and_one_byte_past(daemon: Daemon) -> None:
    token, sid = await setup(daemon)
    ws = daemon.root / "workspaces" / "p"
    (ws / "max.png").write_bytes(png_of_size(MAX_IMAGE))
    (ws / "over.png").write_bytes(png_of_size(MAX_IMAGE + 1))
    body = await run_tool(daemon, token, sid, "r1", "view_image", {"path": "max.png"})
    assert body["structured_content"]["size"] == MAX_IMAGE, body["content"]
    r = await daemon.get(f"/artifacts/{body['structured_content']['artifact_id']}", token)
    assert r.status_code == 200 and r.content == (ws / "max.png").read_bytes()
    body = await run_tool(daemon, token, sid, "r2", "view_image", {"path": "over.png"})
    assert body["content"][0]["text"] == f"TOO_LARGE: over.png: {MAX_IMAGE + 1} bytes; images are at most {MAX_IMAGE}"


async def test_patch_file_takes_128_hunks_and_refuses_129(daemon: Daemon) -> None:
    token, sid = await setup(daemon)
    ws = daemon.root / "workspaces" / "p"
    original = "".join(f"line {i}\n" for i in range(300))
    (ws / "h.txt").write_text(original)
    patch = "".join(f"@@\n-line {2 * i}\n+LINE {2 * i}\n" for i in range(129))
    body = await run_tool(daemon, token, sid, "r1", "patch_file", {"path": "h.txt", "patch": patch})
    assert body["content"][0]["text"] == "TOO_MANY_UNITS: more than 128 hunks"
    assert (ws / "h.txt").read_text() == original
    patch = "".join(f"@@\n-line {2 * i}\n+LINE {2 * i}\n" for i in range(128))
    body = await run_tool(daemon, token, sid, "r2", "patch_file", {"path": "h.txt", "patch": patch})
    assert body["structured_content"]["units_applied"] == 128, body["content"]
    assert (ws / "h.txt").read_text().count("LINE ") == 128


async def test_a_tool_call_is_found_by_the_characters_its_json_escapes(daemon: Daemon) -> None:
    # Arguments are JSON, and a model (the faux one among them) may spell every character past
    # ASCII as a \u escape: the call was indexed as sent ("caf\u00e9"), so a search for the
    # word it names ("café", "文件") never found the call, and its snippet showed the escapes.
    token, sid = await setup(daemon)
    for i, path in enumerate(("cafébar.txt", "文件名.txt", "emoji😀x.txt")):
        escaped = json.dumps({"path": path})  # (ASCII: "caf\\u00e9…", the emoji as a surrogate pair)
        assert escaped.isascii()
        await daemon.submit(token, sid, f"r{i}", f"/tool read_file {escaped}")
        await daemon.wait_idle(token, sid)
    for i, (query, path) in enumerate((("cafébar", "cafébar.txt"), ("文件名", "文件名.txt"), ("emoji😀x", "emoji😀x.txt"))):
        body = await run_tool(daemon, token, sid, f"s{i}", "history_search", {"query": query})
        calls = [r for r in body["structured_content"]["results"] if r["role"] == "tool_call"
                 and r["snippet"].startswith("read_file")]
        assert len(calls) == 1, body["structured_content"]["results"]
        page = await run_tool(daemon, token, sid, f"p{i}", "history_read",
                              {"context_item_id": calls[0]["context_item_id"]})
        assert page["content"][0]["text"].endswith('read_file {"path": "' + path + '"}'), page["content"]
    # an escaped quote, backslash or control character stays as the JSON spells it
    await daemon.submit(token, sid, "q", '/tool read_file {"path": "a\\u0022b\\\\u00e9c\\u0001"}')
    await daemon.wait_idle(token, sid)
    body = await run_tool(daemon, token, sid, "sq", "history_search", {"query": "u00e9c"})
    assert any(r["role"] == "tool_call" for r in body["structured_content"]["results"]), body


async def test_history_tools_refuse_a_limit_or_offset_quoting_the_value_and_its_type(daemon: Daemon) -> None:
    # history_search's and history_read's limit and offset of another type were refused as "limit
    # must be an integer", and out of range as "limit must be from 1 to 100" (an offset past the
    # item "offset must be from 0 to N"), without the value received: the other tools' integer
    # refusals (tools.workspace_tools.int_arg) name the argument and quote the value as JSON.
    token, sid = await setup(daemon)
    await daemon.submit(token, sid, "input", "a line about the quarterly zebrafish")
    await daemon.wait_idle(token, sid)

    async def found() -> list[dict] | None:
        body = await run_tool(daemon, token, sid, f"s-{len(seen)}", "history_search", {"query": "zebrafish"})
        seen.append(body)
        return body["structured_content"]["results"] or None

    seen: list[dict] = []
    item = (await wait_until(found, what="the input indexed"))[0]["context_item_id"]
    calls = [
        ("history_search", {"query": "zebrafish", "limit": "5"}, 'limit must be an integer from 1 to 100, got "5"'),
        ("history_search", {"query": "zebrafish", "limit": 2.5}, "limit must be an integer from 1 to 100, got 2.5"),
        ("history_search", {"query": "zebrafish", "limit": True}, "limit must be an integer from 1 to 100, got true"),
        ("history_search", {"query": "zebrafish", "limit": -1}, "limit must be an integer from 1 to 100, got -1"),
        ("history_search", {"query": "zebrafish", "limit": 0}, "limit must be an integer from 1 to 100, got 0"),
        ("history_search", {"query": "zebrafish", "limit": 101}, "limit must be an integer from 1 to 100, got 101"),
        ("history_search", {"query": "zebrafish", "limit": [5]}, "limit must be an integer from 1 to 100, got [5]"),
        ("history_read", {"context_item_id": item, "offset": "0"},
         'offset must be an integer of 0 or more (a byte offset within the item), got "0"'),
        ("history_read", {"context_item_id": item, "offset": 1.5},
         "offset must be an integer of 0 or more (a byte offset within the item), got 1.5"),
        ("history_read", {"context_item_id": item, "offset": False},
         "offset must be an integer of 0 or more (a byte offset within the item), got false"),
        ("history_read", {"context_item_id": item, "offset": -1},
         "offset must be an integer of 0 or more (a byte offset within the item), got -1"),
        ("history_read", {"context_item_id": item, "limit": "100"}, 'limit must be an integer from 1 to 1048576, got "100"'),
        ("history_read", {"context_item_id": item, "limit": 0}, "limit must be an integer from 1 to 1048576, got 0"),
        ("history_read", {"context_item_id": item, "limit": 1048577},
         "limit must be an integer from 1 to 1048576, got 1048577"),
        ("history_read", {"context_item_id": item, "limit": {"n": 1}},
         'limit must be an integer from 1 to 1048576, got {"n": 1}'),
    ]
    for i, (name, args, message) in enumerate(calls):
        body = await run_tool(daemon, token, sid, f"h{i}", name, args)
        assert (body["error_code"], body["content"][0]["text"]) == ("INVALID_ARGUMENT", f"INVALID_ARGUMENT: {message}"), \
            (name, args, body["content"])
    # past the item's size: its size named, the value quoted; at the edges the calls run
    page = await run_tool(daemon, token, sid, "p0", "history_read", {"context_item_id": item, "limit": 1048576})
    size = page["structured_content"]["size"]
    body = await run_tool(daemon, token, sid, "p1", "history_read", {"context_item_id": item, "offset": size + 1})
    assert body["content"][0]["text"] == \
        f"INVALID_ARGUMENT: offset must be from 0 to {size} (the item's size in bytes), got {size + 1}", body["content"]
    body = await run_tool(daemon, token, sid, "p2", "history_read", {"context_item_id": item, "offset": size})
    assert not body["is_error"] and body["structured_content"]["eof"], body["content"]
    body = await run_tool(daemon, token, sid, "p3", "history_search", {"query": "zebrafish", "limit": 100})
    assert not body["is_error"], body["content"]
