"""A model's ``history_search`` leaves out its own call (docs/decisions.md, "A history search
leaves out its own call"): the call holds the query and is in the Full Context before the tool
runs, so it found itself every time. Earlier searches' calls stay findable, paging stays whole,
and a program's search leaves out the program's call. ``POST /history/search`` is unchanged.

Through the real daemon, the faux model calling the real tool."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, DaemonFactory, finished, run_tool

WORD = "zyzzyvaquill"  # found nowhere but in the searches' calls
SCRIPT = [
    {"when": "first look", "toolCalls": [{"name": "history_search", "arguments": {"query": WORD}}]},
    {"when": "second look", "toolCalls": [{"name": "history_search", "arguments": {"query": WORD}}]},
    {"when": "program look", "toolCalls": [{"name": "programmatic_tool_run", "arguments": {
        "code": f"r = history_search(query={WORD!r})\nprint('found', len(r['results']))"}}]},
]
FAUX = {"providers": [{"id": "faux", "protocol": "faux", "script": SCRIPT, "models": [{"id": "faux-1"}]}],
        "defaultModel": "faux/faux-1"}


def _call_item(view: dict[str, Any], call_id: str) -> str:
    """The context item id of the call ``call_id``."""
    found = [it["id"] for it in view["items"] if it["role"] == "tool_call" and it["call"]["callId"] == call_id]
    assert len(found) == 1, (call_id, view["items"])
    return found[0]


async def _http(d: Daemon, token: str, pid: str, query: str, **more: Any) -> list[dict[str, Any]]:
    resp = await d.post("/history/search", token, {"projectId": pid, "query": query, "limit": 100, **more})
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


async def _start(daemon_factory: DaemonFactory, config: dict[str, Any]) -> tuple[Daemon, str, str, str]:
    d = await daemon_factory(config=config)
    token = await d.pair("own-call", strong=True)
    pid = (await d.project(token))["id"]
    sid = (await d.session(token, pid))["id"]
    return d, token, pid, sid


async def test_a_search_finds_what_was_there_before_it_not_its_own_call(daemon_factory: DaemonFactory) -> None:
    d, token, pid, sid = await _start(daemon_factory, FAUX)
    await d.submit(token, sid, "r1", "first look")
    await d.wait_idle(token, sid)
    first = finished(await d.events(token, sid))[-1]
    assert first["status"] == "ok", first
    # its own call is the only item holding the word: it finds nothing
    assert first["structured_content"] == {"results": [], "next_after_context_item_id": None}
    assert first["content"][0]["text"].splitlines()[1] == "0 result(s):"

    await d.submit(token, sid, "r2", "second look")
    await d.wait_idle(token, sid)
    second = finished(await d.events(token, sid))[-1]
    view = await d.view(token, sid)
    first_item, second_item = _call_item(view, first["call_id"]), _call_item(view, second["call_id"])
    # the first search's call is evidence like any other; the second's own call is not found
    results = second["structured_content"]["results"]
    assert [(r["context_item_id"], r["role"]) for r in results] == [(first_item, "tool_call")], results
    assert f"[{WORD}]" in results[0]["snippet"]

    # over HTTP nothing is left out: both calls, and the second's result quoting the first
    found = {r["contextItemId"]: r["role"] for r in await _http(d, token, pid, WORD)}
    assert found[first_item] == found[second_item] == "tool_call"


async def test_a_programs_search_leaves_out_the_programs_call(daemon_factory: DaemonFactory) -> None:
    d, token, pid, sid = await _start(daemon_factory, {**FAUX, "localPtc": {}})
    await d.submit(token, sid, "r1", "program look")
    await d.wait_idle(token, sid)
    body = finished(await d.events(token, sid))[-1]
    assert body["status"] == "ok", body
    # the program's code holds the query: its call is the only item with the word
    assert body["content"][0]["text"].strip() == "found 0", body
    program_item = _call_item(await d.view(token, sid), body["call_id"])
    assert [r["contextItemId"] for r in await _http(d, token, pid, WORD)] == [program_item]


TEXTS = [
    "quokka",
    "a quokka in the garden, near the old stone wall by the river, eating the grass at dusk",
    "quokka quokka",
    "the quokka and the wombat met by the gate of the garden when the rain began to fall on the hill",
    "wombat",
    "one more quokka, sitting in the long grass beside the path that leads up to the farmhouse",
]


async def test_pages_of_a_search_leave_out_its_call_and_stay_whole(daemon_factory: DaemonFactory) -> None:
    """Pages are taken in the search's order (relevance, then recency) over what was there before
    the call: the call falls inside the first page, which is still full, and the next page goes on
    after the cursor without a gap or a repeat."""
    faux = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}],
            "defaultModel": "faux/faux-1"}
    d, token, pid, sid = await _start(daemon_factory, faux)
    for i, text in enumerate(TEXTS):
        await d.submit(token, sid, f"t{i}", text)
        await d.wait_idle(token, sid)
    limit = 6
    body = await run_tool(d, token, sid, "p1", "history_search", {"query": "quokka", "limit": limit})
    assert body["status"] == "ok", body
    own = _call_item(await d.view(token, sid), body["call_id"])
    own_seq = int(own[1:].split(".")[0])
    ordered = [r["contextItemId"] for r in await _http(d, token, pid, "quokka")]
    # (the search's order is the same over HTTP; what came after the call is not in it)
    before = [r["contextItemId"] for r in await _http(d, token, pid, "quokka")
              if r["seq"] < own_seq or r["contextItemId"] == own]
    assert before == [i for i in ordered if i in before]
    assert before.index(own) < limit - 1, before  # the call would have fallen inside the page
    expected = [i for i in before if i != own]
    assert len(expected) > limit
    page = body["structured_content"]
    assert [r["context_item_id"] for r in page["results"]] == expected[:limit]
    assert page["next_after_context_item_id"] == expected[limit - 1]

    # the next page, asked by another call: the first call is an item before it now
    cursor = page["next_after_context_item_id"]
    body2 = await run_tool(d, token, sid, "p2", "history_search",
                           {"query": "quokka", "limit": limit, "after_context_item_id": cursor})
    own2 = _call_item(await d.view(token, sid), body2["call_id"])
    own2_seq = int(own2[1:].split(".")[0])
    before2 = [r["contextItemId"] for r in await _http(d, token, pid, "quokka") if r["seq"] < own2_seq]
    assert own in before2 and own2 not in before2
    after_cursor = before2[before2.index(cursor) + 1:]
    got = [r["context_item_id"] for r in body2["structured_content"]["results"]]
    assert got == after_cursor[:limit] and own2 not in got
    assert not set(got) & {r["context_item_id"] for r in page["results"]}
