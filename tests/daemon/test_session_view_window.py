"""``GET /sessions/{id}`` over a long session: the view's ``items`` are a window of the main
agent's projected items (the latest ``VIEW_ITEMS_MAX`` unless a client asks for another one with
``itemsLimit`` / ``itemsBefore``), with ``itemsTotal`` and ``itemsStart`` saying where it lies.

The long session is appended through the real store before the daemon starts (one
``instruction.appended`` per item, each a system item of the main agent); the daemon wakes it by
replay like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.store import Draft, open_store
from events.types import InstructionAppended, SessionCreated
from runtime.views import VIEW_ITEMS_MAX

from .conftest import error_of, run_tool

TOTAL = VIEW_ITEMS_MAX + 205


@pytest.fixture
async def long_session(daemon_factory, tmp_path: Path):
    """A daemon over a log holding ``ses_long``, whose main agent has TOTAL items ``n0`` … ;
    yields (daemon, read-only token)."""
    async with open_store(tmp_path / "data") as store:
        await store.append(Draft(SessionCreated(model="faux/echo"), project_id="prj_x", session_id="ses_long",
                                 agent_id="main"))
        for first in range(0, TOTAL, 500):
            await store.append(*[Draft(InstructionAppended(text=f"n{i}"), project_id="prj_x", session_id="ses_long",
                                       agent_id="main") for i in range(first, min(TOTAL, first + 500))])
    daemon = await daemon_factory(root=tmp_path)
    yield daemon, await daemon.pair("reader", strong=False)


async def view(daemon, token: str, **params: int | str) -> dict:
    r = await daemon.get("/sessions/ses_long", token, params=params)
    assert r.status_code == 200, r.text[:300]
    return r.json()


def texts(v: dict) -> list[str]:
    return [it["text"] for it in v["items"]]


async def test_a_long_sessions_view_holds_its_latest_items_and_says_where_they_start(long_session):
    daemon, token = long_session
    v = await view(daemon, token)
    assert (v["itemsTotal"], v["itemsStart"]) == (TOTAL, TOTAL - VIEW_ITEMS_MAX)
    assert texts(v) == [f"n{i}" for i in range(TOTAL - VIEW_ITEMS_MAX, TOTAL)]
    assert v["status"] == "idle" and v["queued"] == [] and v["todos"] == [] and "usage" in v


async def test_windows_page_back_through_every_item_once(long_session):
    daemon, token = long_session
    seen: list[str] = []
    before = None
    while before != 0:
        v = await view(daemon, token, itemsLimit=300, **({} if before is None else {"itemsBefore": before}))
        assert v["itemsTotal"] == TOTAL and len(v["items"]) == min(300, before if before is not None else TOTAL)
        seen = texts(v) + seen
        before = v["itemsStart"]
    assert seen == [f"n{i}" for i in range(TOTAL)]


async def test_the_window_is_taken_at_its_edges(long_session):
    daemon, token = long_session
    assert texts(await view(daemon, token, itemsLimit=1)) == [f"n{TOTAL - 1}"]
    assert len((await view(daemon, token, itemsLimit=VIEW_ITEMS_MAX))["items"]) == VIEW_ITEMS_MAX
    v = await view(daemon, token, itemsBefore=0)
    assert (v["items"], v["itemsStart"], v["itemsTotal"]) == ([], 0, TOTAL)
    v = await view(daemon, token, itemsBefore=1, itemsLimit=VIEW_ITEMS_MAX)
    assert (texts(v), v["itemsStart"]) == (["n0"], 0)
    v = await view(daemon, token, itemsBefore=TOTAL, itemsLimit=2)
    assert (texts(v), v["itemsStart"]) == ([f"n{TOTAL - 2}", f"n{TOTAL - 1}"], TOTAL - 2)


@pytest.mark.parametrize("query, name", [
    ("itemsLimit=0", "itemsLimit"), (f"itemsLimit={VIEW_ITEMS_MAX + 1}", "itemsLimit"), ("itemsLimit=-1", "itemsLimit"),
    ("itemsLimit=x", "itemsLimit"), ("itemsLimit=", "itemsLimit"), ("itemsLimit=5&itemsLimit=6", "itemsLimit"),
    ("itemsBefore=-1", "itemsBefore"), ("itemsBefore=1.5", "itemsBefore"), (f"itemsBefore={TOTAL + 1}", "itemsBefore"),
    ("itemsBefore=" + "9" * 30, "itemsBefore"),
])
async def test_a_bad_window_is_400_naming_its_parameter(long_session, query: str, name: str):
    daemon, token = long_session
    r = await daemon.get(f"/sessions/ses_long?{query}", token)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text[:300]
    assert name in r.json()["error"]["message"]


async def test_a_short_sessions_view_is_whole_and_its_window_counts_a_call_with_its_result_once(daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await run_tool(daemon, strong, sid, "r1", "get_system_time", {})
    await daemon.wait_idle(strong, sid)
    v = await daemon.view(strong, sid)
    # the input, the call (its result inside it) and the answer: everything, from the start
    assert [it["role"] for it in v["items"]][:2] == ["user", "tool_call"] and v["items"][1]["result"]["status"] == "ok"
    assert (v["itemsTotal"], v["itemsStart"]) == (len(v["items"]), 0)
    r = await daemon.get(f"/sessions/{sid}", strong, params={"itemsBefore": 2, "itemsLimit": 1})
    assert r.status_code == 200 and r.json()["items"] == v["items"][1:2]
