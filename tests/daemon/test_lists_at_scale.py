"""The lists at scale (docs/decisions.md, "The dashboard and its lists at scale").

A session's view lists at most ``VIEW_AGENTS_MAX`` agents by default; ``agentsStart`` /
``agentsLimit`` page through all of them in the order they started. ``GET /projects`` and
``GET /sessions`` answer whole as the spec writes them; ``limit`` / ``after`` page them, with
``nextAfter``. The agents are real subagents run by the daemon (the scripted faux provider asks
for that many ``subagent`` calls in one answer); the lists' 2,000 sessions over 50 projects are
appended through the real store before the daemon starts, as a long-lived daemon's log holds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest
import trio

from events.store import Draft, open_store
from events.types import ProjectCreated, SessionCreated, SessionDeleted
from projections.catalog import ProjectsProjection, SessionsProjection
from runtime import list_pages
from runtime.list_pages import LIST_LIMIT_MAX, ListOrder
from runtime.views import VIEW_AGENTS_MAX

from .conftest import LIMIT, error_of

# ``fanout-N`` asks for N subagents in one answer; each subagent answers at once.
FANOUTS = (VIEW_AGENTS_MAX - 1, VIEW_AGENTS_MAX, VIEW_AGENTS_MAX + 1)
CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}], "script": [
    *({"when": f"fanout-{n}.", "toolCalls": [{"name": "subagent", "arguments": {"prompt": f"SUBJOB {i}"}}
                                             for i in range(n)]} for n in FANOUTS),
    {"when": "SUBJOB", "text": "sub done"}]}], "defaultModel": "faux/faux-1"}


async def test_every_agent_of_a_session_past_the_bound_is_read_by_paging(daemon_factory, tmp_path: Path):
    """The main agent and 98, 99 and 100 subagents (the bound less one, at it, one past it): the
    default view is as it was (at most 100, no ``agentsStart``); pages of any size give every
    agent once, in the order they started; a page at the end is empty; past it is 400."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("lists", strong=True)
    project = await d.project(token)
    for n in FANOUTS:
        sid = (await d.session(token, project["id"]))["id"]
        await d.submit(token, sid, "r1", f"fanout-{n}.")
        await d.wait_idle(token, sid, timeout=6 * LIMIT)
        total = n + 1
        view = await d.view(token, sid)
        assert view["agentsTotal"] == total and "agentsStart" not in view
        assert len(view["agents"]) == min(total, VIEW_AGENTS_MAX)
        for size in (VIEW_AGENTS_MAX, 7, 1):
            seen: list[dict[str, Any]] = []
            while True:
                r = await d.get(f"/sessions/{sid}", token, params={"agentsStart": len(seen), "agentsLimit": size,
                                                                   "itemsLimit": 1})
                assert r.status_code == 200, r.text[:300]
                page = r.json()
                assert page["agentsStart"] == len(seen) and page["agentsTotal"] == total
                if not page["agents"]:
                    break
                assert len(page["agents"]) == min(size, total - len(seen))
                seen += page["agents"]
            ids = [a["agentId"] for a in seen]
            assert len(ids) == len(set(ids)) == total and ids[0] == "main"
            assert all(a["status"] == "completed" for a in seen[1:]), {a["status"] for a in seen}
            # (the default view's agents are among them, as it shows them)
            assert all(a in seen for a in view["agents"][1:])
            if size == VIEW_AGENTS_MAX:
                # the order they started: each subagent's prompt names its place
                prompts = [await first_prompt(d, token, sid, aid) for aid in ids[1:4]]
                assert prompts == ["SUBJOB 0", "SUBJOB 1", "SUBJOB 2"]
        at_end = (await d.get(f"/sessions/{sid}", token, params={"agentsStart": total})).json()
        assert at_end["agents"] == [] and at_end["agentsStart"] == total
        r = await d.get(f"/sessions/{sid}", token, params={"agentsStart": total + 1})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
        assert f"agentsStart {total + 1} is past the session's {total} agents" in r.json()["error"]["message"]


async def first_prompt(d, token: str, sid: str, agent_id: str) -> str:
    events = await d.events(token, sid)
    return next(e["body"]["prompt"] for e in events if e["kind"] == "agent.started" and e["agent_id"] == agent_id)


@pytest.mark.parametrize("query, says", [
    ("agentsStart=-1", "agentsStart must be from 0"), ("agentsStart=x", "agentsStart must be an integer"),
    ("agentsStart=", "agentsStart must be an integer"), ("agentsStart=0&agentsStart=1", "agentsStart is given 2 times"),
    ("agentsStart=0&agentsLimit=0", "agentsLimit must be from 1 to 100"),
    (f"agentsStart=0&agentsLimit={VIEW_AGENTS_MAX + 1}", "agentsLimit must be from 1 to 100"),
    ("agentsLimit=5", "agentsLimit sizes a page that agentsStart begins; give agentsStart too"),
])
async def test_a_bad_agents_page_is_400_naming_its_parameter(daemon, strong: str, query: str, says: str):
    project = await daemon.project(strong)
    sid = (await daemon.session(strong, project["id"]))["id"]
    r = await daemon.get(f"/sessions/{sid}?{query}", strong)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text[:300]
    assert says in r.json()["error"]["message"]
    ok = await daemon.get(f"/sessions/{sid}?agentsStart=0&agentsLimit={VIEW_AGENTS_MAX}", strong)
    assert ok.status_code == 200 and [a["agentId"] for a in ok.json()["agents"]] == ["main"]


PROJECTS, SESSIONS = 50, 2000


@pytest.fixture
async def many(daemon_factory, tmp_path: Path):
    """A daemon over a log of 50 projects and 2,000 sessions (40 each, every 10th deleted), plus one
    project without sessions; yields (daemon, read-only token)."""
    async with open_store(tmp_path / "data") as store:
        for p in range(PROJECTS + 1):
            await store.append(Draft(ProjectCreated(name=f"Project {p}", workspace=str(tmp_path)),
                                     project_id=f"prj_{p:03d}"))
        for first in range(0, SESSIONS, 500):  # (in batches: many share a millisecond, so ties are met)
            await store.append(*[Draft(SessionCreated(model="faux/faux-1"), project_id=f"prj_{i % PROJECTS:03d}",
                                       session_id=f"ses_{i:05d}", agent_id="main")
                                 for i in range(first, min(SESSIONS, first + 500))])
        await store.append(*[Draft(SessionDeleted(), project_id=f"prj_{i % PROJECTS:03d}", session_id=f"ses_{i:05d}",
                                   agent_id="main") for i in range(0, SESSIONS, 10)])
    d = await daemon_factory(root=tmp_path)
    yield d, await d.pair("reader", strong=False)


async def paged(d, token: str, path: str, key: str, limit: int, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    for _ in range(SESSIONS + 2):
        r = await d.get(path, token, params={**params, "limit": limit, **({} if after is None else {"after": after})})
        assert r.status_code == 200, r.text[:300]
        body = r.json()
        assert len(body[key]) <= limit
        rows += body[key]
        after = body["nextAfter"]
        if after is None:
            return rows
        assert after == body[key][-1]["id"] and len(body[key]) == limit
    raise AssertionError("the pages did not end")


async def test_the_lists_answer_whole_by_default_and_their_pages_hold_the_same_rows(many):
    d, token = many
    projects = (await d.get("/projects", token)).json()
    assert list(projects) == ["projects"] and len(projects["projects"]) == PROJECTS + 1
    whole = (await d.get("/sessions", token)).json()
    assert list(whole) == ["sessions"] and len(whole["sessions"]) == SESSIONS - SESSIONS // 10
    assert await paged(d, token, "/projects", "projects", 7) == projects["projects"]
    assert await paged(d, token, "/projects", "projects", LIST_LIMIT_MAX) == projects["projects"]
    for limit in (1000, 333, 1):
        assert await paged(d, token, "/sessions", "sessions", limit) == whole["sessions"]
    every = (await d.get("/sessions", token, params={"includeDeleted": "true"})).json()["sessions"]
    assert len(every) == SESSIONS
    assert await paged(d, token, "/sessions", "sessions", 300, includeDeleted="true") == every
    one = (await d.get("/sessions", token, params={"project": "prj_007"})).json()["sessions"]
    assert len(one) == sum(1 for i in range(SESSIONS) if i % PROJECTS == 7 and i % 10)
    assert await paged(d, token, "/sessions", "sessions", 10, project="prj_007") == one
    # an empty project: an empty page, and no next one
    r = await d.get("/sessions", token, params={"project": f"prj_{PROJECTS:03d}", "limit": 1})
    assert r.status_code == 200 and r.json() == {"sessions": [], "nextAfter": None}
    # exactly the rows there are: the page is full and says there is no next
    r = await d.get("/sessions", token, params={"project": "prj_007", "limit": len(one)})
    assert r.json() == {"sessions": one, "nextAfter": None}
    r = await d.get("/sessions", token, params={"project": "prj_007", "limit": len(one) - 1})
    assert r.json() == {"sessions": one[:-1], "nextAfter": one[-2]["id"]}


async def test_a_page_goes_on_from_a_session_deleted_or_made_between_pages(many, tmp_path: Path):
    d, token = many
    strong = await d.pair("writer", strong=True)
    first = (await d.get("/sessions", token, params={"project": "prj_003", "limit": 5})).json()
    cursor = first["nextAfter"]
    r = await d.request("DELETE", f"/sessions/{cursor}", strong)
    assert r.status_code in (200, 204), r.text[:300]
    made = (await d.session(strong, "prj_003"))["id"]
    rest = await paged_from(d, token, cursor, project="prj_003")
    before = (await d.get("/sessions", token, params={"project": "prj_003"})).json()["sessions"]
    assert before[0]["id"] == made  # (the newest first: before any page's cursor)
    assert first["sessions"][:4] + rest == [s for s in before[1:] if s["id"] != cursor]


async def paged_from(d, token: str, after: str, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while after is not None:
        body = (await d.get("/sessions", token, params={**params, "limit": 4, "after": after})).json()
        rows += body["sessions"]
        after = body["nextAfter"]
    return rows


@pytest.mark.parametrize("path, query, says", [
    ("/sessions", "limit=0", "limit must be from 1 to 1000"),
    ("/sessions", f"limit={LIST_LIMIT_MAX + 1}", "limit must be from 1 to 1000"),
    ("/projects", "limit=x", "limit must be an integer"),
    ("/projects", "limit=", "limit must be an integer"),
    ("/sessions", "limit=1&limit=2", "limit is given 2 times"),
    ("/sessions", "after=ses_00001", "after continues a page that limit sizes; give limit too"),
    ("/sessions", "limit=1&after=ses_nowhere", "after names no session ('ses_nowhere')"),
    ("/projects", "limit=1&after=prj_nowhere", "after names no project ('prj_nowhere')"),
    ("/projects", "limit=1&after=", "after (project id)"),
    ("/projects", "order=new", "order must be oldest (the default) or newest"),
    ("/projects", "order=", "order must be oldest (the default) or newest"),
    ("/projects", "limit=1&order=NEWEST", "order must be oldest (the default) or newest"),
    ("/projects", "order=newest&order=oldest", "order is given 2 times"),
    ("/sessions", "order=oldest", "the session list is newest first: order must be newest (the default)"),
    ("/sessions", "project=prj_001&limit=5&order=", "order must be newest (the default)"),
    ("/sessions", "order=newest&order=newest", "order is given 2 times"),
])
async def test_a_bad_page_of_a_list_is_400_naming_its_parameter(many, path: str, query: str, says: str):
    d, token = many
    r = await d.get(f"{path}?{query}", token)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text[:300]
    assert says in r.json()["error"]["message"], r.json()
    with trio.fail_after(LIMIT):
        ok = await d.get(f"{path}?limit={LIST_LIMIT_MAX}", token)
    assert ok.status_code == 200 and len(ok.json()[path[1:]]) == (PROJECTS + 1 if path == "/projects" else LIST_LIMIT_MAX)


async def test_the_projects_newest_first_are_the_whole_list_reversed(many):
    """``order=newest`` reads the project list from its end: its pages, of any size, hold the
    whole list's rows reversed (ties in one millisecond too), so the first page is the newest;
    ``order=oldest`` is the list as the spec answers it."""
    d, token = many
    whole = (await d.get("/projects", token)).json()["projects"]
    assert len({p["createdTs"] for p in whole}) < len(whole)  # (rows made in one millisecond: the ties)
    assert (await d.get("/projects", token, params={"order": "oldest"})).json() == {"projects": whole}
    assert (await d.get("/projects", token, params={"order": "newest"})).json() == {"projects": whole[::-1]}
    for limit in (7, 1, LIST_LIMIT_MAX):
        assert await paged(d, token, "/projects", "projects", limit, order="newest") == whole[::-1]
        assert await paged(d, token, "/projects", "projects", limit, order="oldest") == whole
    r = await d.get("/projects", token, params={"order": "newest", "limit": 3})
    assert r.json() == {"projects": whole[:-4:-1], "nextAfter": whole[-3]["id"]}


async def test_the_session_list_takes_order_newest_its_only_order(many):
    """The session list is newest first; ``order=newest`` names that order (the same rows, pages
    and ``nextAfter`` as without it) and any other order is refused above, not silently ignored."""
    d, token = many
    whole = (await d.get("/sessions", token)).json()
    assert (await d.get("/sessions", token, params={"order": "newest"})).json() == whole
    one = (await d.get("/sessions", token, params={"project": "prj_007"})).json()["sessions"]
    assert await paged(d, token, "/sessions", "sessions", 9, project="prj_007", order="newest") == one


def plan(db: Path, order: ListOrder, where: list[str], args: list[Any], after_key: tuple[int, str] | None) -> str:
    """SQLite's plan of the read a route makes of ``order``'s list (the same SQL: its select, its tail)."""
    tail, tail_args = order.page(where, args, after_key, 50)
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + order.select + tail, tail_args))
    finally:
        conn.close()


async def test_a_page_of_a_list_is_read_from_its_index_never_sorted(many):
    """Each list's page (the first, and one after a cursor) is read from the index of its order:
    ``sessions_created`` without a project, ``sessions_project`` within one, ``projects_created``
    either way; SQLite never sorts the table (no temporary B-tree) to find a page."""
    d, _ = many
    db = d.data_dir / "projections.db"
    cursor = (1, "ses_00001")
    for order, where, args, index in (
            (list_pages.SESSIONS, ["deleted = 0"], [], "sessions_created"),
            (list_pages.SESSIONS, [], [], "sessions_created"),
            (list_pages.SESSIONS, ["project_id = ?", "deleted = 0"], ["prj_007"], "sessions_project"),
            (list_pages.PROJECTS, [], [], "projects_created"),
            (list_pages.PROJECTS_NEWEST, [], [], "projects_created")):
        for after_key in (None, cursor):
            found = plan(db, order, where, args, after_key)
            assert f"INDEX {index}" in found and "TEMP B-TREE" not in found, (order, where, after_key, found)
            if after_key is not None:  # (the cursor bounds the index's range: a seek, not a scan from the start)
                assert found.startswith(f"SEARCH {order.table} USING"), found


async def test_an_old_projections_db_is_rebuilt_with_the_indexes_when_the_daemon_starts(daemon_factory,
                                                                                       tmp_path: Path):
    """A ``projections.db`` written by the versions before the indexes (projects 1, sessions 4:
    the same tables, ``sessions_project`` on ``(project_id, created_ts)``, no other index) is
    rebuilt when the daemon starts: its projections are of another version. The lists then answer
    as before, and read from the indexes."""
    async with open_store(tmp_path / "data") as store:
        for p in range(3):
            await store.append(Draft(ProjectCreated(name=f"Project {p}", workspace=str(tmp_path)), project_id=f"prj_{p}"))
        await store.append(*[Draft(SessionCreated(model="faux/faux-1"), project_id=f"prj_{i % 3}",
                                   session_id=f"ses_{i:03d}", agent_id="main") for i in range(300)])
    d = await daemon_factory(root=tmp_path)
    token = await d.pair("reader", strong=False)
    before = [(await d.get(path, token)).json() for path in ("/projects", "/sessions", "/sessions?project=prj_1")]
    d.stop.set()
    with trio.fail_after(LIMIT):
        await d.done.wait()
    db = tmp_path / "data" / "projections.db"
    conn = apsw.Connection(str(db))
    with conn:  # (the file as the earlier versions left it)
        for index in ("sessions_created", "projects_created", "sessions_project"):
            conn.execute(f"DROP INDEX IF EXISTS {index}")
        conn.execute("CREATE INDEX sessions_project ON sessions(project_id, created_ts)")
        conn.execute("UPDATE positions SET version = 4 WHERE name = 'sessions'")
        conn.execute("UPDATE positions SET version = 1 WHERE name = 'projects'")
    conn.close()
    assert "TEMP B-TREE" in plan(db, list_pages.SESSIONS, ["deleted = 0"], [], None)
    d = await daemon_factory(root=tmp_path)
    token = await d.pair("reader-again", strong=False)
    assert [(await d.get(path, token)).json() for path in ("/projects", "/sessions", "/sessions?project=prj_1")] == before
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        versions = dict(conn.execute("SELECT name, version FROM positions WHERE name IN ('projects', 'sessions')"))
        indexes = {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()
    assert versions == {"projects": ProjectsProjection.version, "sessions": SessionsProjection.version}
    assert "created_ts DESC, id" in indexes["sessions_project"] and "sessions_created" in indexes
    assert "projects_created" in indexes
    found = plan(db, list_pages.SESSIONS, ["deleted = 0"], [], None)
    assert "INDEX sessions_created" in found and "TEMP B-TREE" not in found, found
