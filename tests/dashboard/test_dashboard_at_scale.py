"""The dashboard at scale (docs/decisions.md, "The dashboard and its lists at scale"): every agent
of a session past the view's bound is reached from the Agents pane ("Show N more", pages of the
view's ``agentsStart``), and a project's session list shows its newest sessions with "Show more
sessions", read in pages (``limit`` / ``after``), never whole. One real daemon (``lens serve``)
and one headless Chromium, as in ``test_dashboard_browser.py`` (its helpers); the subagents are
run by the daemon from the scripted faux provider, the large logs appended through the real store;
every wait is for a condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from selenium.webdriver.common.keys import Keys

from events.store import Draft, open_store
from events.types import ProjectCreated, SessionCreated, SessionDeleted
from runtime.views import VIEW_AGENTS_MAX
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, attrs, browser, by_css, click, connect, console_errors, network_requests, press, texts, wait_for)
from tests.dashboard.test_dashboard_this_round import write_sessions_with_agents

FANOUTS = (VIEW_AGENTS_MAX - 1, VIEW_AGENTS_MAX)  # with the main agent: exactly the bound, one past
CONFIG = {"server": {"heartbeatSeconds": 1}, "providers": [{
    "id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}], "script": [
        *({"when": f"fanout-{n}.", "toolCalls": [{"name": "subagent", "arguments": {"prompt": f"SUBJOB {i}"}}
                                                 for i in range(n)]} for n in FANOUTS),
        {"when": "SUBJOB", "text": "sub done"}]}], "defaultModel": "faux/faux-1"}


def agent_ids(driver: Any) -> list[str]:
    return [t.split(" ")[0] for t in texts(driver, "#agents li.card > span:first-child")]


def wait_idle(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    def idle() -> dict[str, Any] | None:
        status, view = d.request("GET", f"/sessions/{sid}?itemsLimit=1", token=token)
        return view if status == 200 and view["status"] == "idle" and view["agentsTotal"] > 1 else None
    return wait_for(idle, f"{sid} idle after its subagents", timeout=60)


def session_events(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        status, page = d.request("GET", f"/sessions/{sid}/events?after={after}&limit=1000", token=token)
        assert status == 200, page
        events += page["events"]
        if not page["events"]:
            return events
        after = page["nextAfter"]


def test_every_agent_of_a_real_session_is_reached_from_the_page(browser: Any, tmp_path: Path) -> None:
    """The main agent and 98 subagents (100 agents, the bound): all listed, nothing more offered.
    The main agent and 100 (101, one past): 100 listed and "Show 1 more", which reads the page
    of the first agents and lists all 101 once, in the order they started."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    (tmp_path / "ws").mkdir()
    d = Daemon(cwd, CONFIG)
    try:
        token = d.pair("dash-agents-real", strong=True)
        _, project = d.request("POST", "/projects", {"name": "Fan-out", "workspace": str(tmp_path / "ws")}, token)
        sids = {}
        for n in FANOUTS:
            _, session = d.request("POST", "/sessions", {"projectId": project["id"]}, token)
            sids[n] = session["id"]
            status, _ = d.request("POST", f"/sessions/{session['id']}/inputs",
                                  {"requestId": "r1", "content": f"fanout-{n}."}, token)
            assert status == 202
        for n in FANOUTS:
            assert wait_idle(d, token, sids[n])["agentsTotal"] == n + 1
        started = ["main"] + [e["agent_id"] for e in session_events(d, token, sids[VIEW_AGENTS_MAX])
                              if e["kind"] == "agent.started"]
        assert len(started) == VIEW_AGENTS_MAX + 1
        driver = browser
        driver.get(d.base + "/")
        connect(driver, token)
        click(driver, f"#sessions button[data-session-id='{sids[VIEW_AGENTS_MAX - 1]}']")
        wait_for(lambda: len(agent_ids(driver)) == VIEW_AGENTS_MAX, "the 100 agents at the bound")
        assert not by_css(driver, "#agents li.more") and not by_css(driver, "#agents button.more")
        click(driver, f"#sessions button[data-session-id='{sids[VIEW_AGENTS_MAX]}']")
        wait_for(lambda: texts(driver, "#session-id") == [sids[VIEW_AGENTS_MAX]]
                 and len(agent_ids(driver)) == VIEW_AGENTS_MAX and by_css(driver, "#agents button.more"),
                 "100 of the 101 agents and the button for the rest")
        assert texts(driver, "#agents li.more")[0].startswith("showing 100 of 101 agents: the 1 earliest")
        assert texts(driver, "#agents button.more") == ["Show 1 more"]
        assert started[1] not in agent_ids(driver)  # (the earliest to finish is the one left out)
        click(driver, "#agents button.more")
        wait_for(lambda: len(agent_ids(driver)) == VIEW_AGENTS_MAX + 1, "all 101 agents")
        assert agent_ids(driver) == started
        assert not by_css(driver, "#agents li.more")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()


def test_a_session_of_hundreds_of_agents_is_read_a_page_at_a_time_with_the_focus_kept(browser: Any,
                                                                                       tmp_path: Path) -> None:
    """251 agents: 100 shown; "Show 100 more" (pressed from the keyboard) reads the first 100 and
    puts them before the view's, the note and the button standing between, where the 51 left out
    are; the focus stays on the button; the next press shows the rest, each agent once in the order
    they started, and the focus goes on to the first agent after those just shown."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    (tmp_path / "ws").mkdir()
    write_sessions_with_agents(cwd, tmp_path / "ws", {"ses_wide": 250})
    d = Daemon(cwd)
    try:
        token = d.pair("dash-agents-wide", strong=False)
        driver = browser
        driver.get(d.base + "/")
        connect(driver, token)
        click(driver, "#sessions button[data-session-id='ses_wide']")
        wait_for(lambda: len(agent_ids(driver)) == VIEW_AGENTS_MAX and by_css(driver, "#agents button.more"),
                 "the first 100")
        every = ["main"] + [f"sub_call_{i}" for i in range(250)]
        assert agent_ids(driver) == ["main"] + every[-99:]
        press(driver, "#agents button.more", Keys.ENTER)
        wait_for(lambda: len(agent_ids(driver)) == 199, "the first page read")
        assert agent_ids(driver) == every[:100] + every[-99:]
        # (one read of the list: it is drawn again as the view's reads come back)
        assert attrs(driver, "#agents > li", "class")[100] == ["more"]  # (between the two runs: where the left out are)
        assert texts(driver, "#agents li.more")[0].startswith("showing 199 of 251 agents: the 52 that finished after")
        assert driver.execute_script("return document.activeElement.matches('#agents button.more')")
        press(driver, "#agents button.more", Keys.ENTER)
        wait_for(lambda: len(agent_ids(driver)) == 251, "every agent")
        assert agent_ids(driver) == every
        assert not by_css(driver, "#agents li.more")
        assert driver.execute_script("return document.activeElement.textContent").startswith("sub_call_199 ")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()


def write_projects(cwd: Path, workspace: Path, sessions: int) -> None:
    """One project of ``sessions`` sessions (every 50th deleted) and one with none."""

    async def write() -> None:
        async with open_store(cwd / ".lens") as store:
            await store.append(Draft(ProjectCreated(name="Many", workspace=str(workspace)), project_id="prj_many"))
            await store.append(*[Draft(SessionCreated(model="faux/faux-1", name=f"session {i}"), project_id="prj_many",
                                       session_id=f"ses_{i:05d}", agent_id="main") for i in range(sessions)])
            await store.append(*[Draft(SessionDeleted(), project_id="prj_many", session_id=f"ses_{i:05d}",
                                       agent_id="main") for i in range(0, sessions, 50)])
            await store.append(Draft(ProjectCreated(name="Empty", workspace=str(workspace)), project_id="prj_empty"))

    trio.run(write)


# Records each list read the page sends (its query), then passes it on.
RECORD_LIST_READS = """
    window.listReads = [];
    const real = window.fetch;
    window.fetch = (url, init) => {
      if (/\\/api\\/v1\\/sessions\\?/.test(String(url))) window.listReads.push(String(url).split("?")[1]);
      return real(url, init);
    };
"""


def test_a_project_of_many_sessions_lists_its_newest_and_reads_more_on_demand(browser: Any, tmp_path: Path) -> None:
    """450 sessions (9 deleted): the list shows the newest 200 and "Show more sessions"; each
    press adds 200 (the last press the 41 left), then no button; every read has a ``limit``; the
    rows are the daemon's own list in its order. An empty project says so, with no button."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    (tmp_path / "ws").mkdir()
    write_projects(cwd, tmp_path / "ws", 450)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-lists", strong=False)
        _, whole = d.request("GET", "/sessions?project=prj_many", token=token)
        listed = [s["id"] for s in whole["sessions"]]
        assert len(listed) == 441
        driver = browser
        driver.get(d.base + "/")
        driver.execute_script(RECORD_LIST_READS)
        connect(driver, token)
        click(driver, "#projects button[data-project-id='prj_many']")

        def shown() -> list[str]:
            return driver.execute_script("return Array.from(document.querySelectorAll('#sessions button[data-session-id]'),"
                                         " b => b.dataset.sessionId)")

        wait_for(lambda: len(shown()) == 200 and by_css(driver, "#sessions button.more"), "the newest 200")
        assert shown() == listed[:200]
        click(driver, "#sessions button.more")
        wait_for(lambda: len(shown()) == 400, "200 more")
        assert shown() == listed[:400] and by_css(driver, "#sessions button.more")
        click(driver, "#sessions button.more")
        wait_for(lambda: len(shown()) == 441, "the rest")
        assert shown() == listed and not by_css(driver, "#sessions button.more")
        reads = driver.execute_script("return window.listReads")
        assert reads and all("limit=" in q for q in reads), reads
        assert "project=prj_many&limit=200" in reads and "project=prj_many&limit=600" in reads, reads
        click(driver, "#projects button[data-project-id='prj_empty']")
        wait_for(lambda: texts(driver, "#sessions li") == ["No sessions yet."], "the empty project")
        assert not by_css(driver, "#sessions button.more")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()


def write_many_projects(cwd: Path, workspace: Path, projects: int) -> None:
    """``projects`` projects (in batches: many share a millisecond), the newest with one session."""

    async def write() -> None:
        async with open_store(cwd / ".lens") as store:
            for first in range(0, projects, 100):
                await store.append(*[Draft(ProjectCreated(name=f"Project {p}", workspace=str(workspace)),
                                           project_id=f"prj_{p:04d}") for p in range(first, min(projects, first + 100))])
            await store.append(Draft(SessionCreated(model="faux/faux-1", name="the newest's"),
                                     project_id=f"prj_{projects - 1:04d}", session_id="ses_newest", agent_id="main"))

    trio.run(write)


def projects_shown(driver: Any) -> list[str]:
    """The ids of the projects the page lists, in its order."""
    return driver.execute_script("return Array.from(document.querySelectorAll('#projects button[data-project-id]'),"
                                 " b => b.dataset.projectId)")


def projects_listed(d: Daemon, token: str) -> list[str]:
    """The ids of every project the daemon lists, in its order."""
    return [p["id"] for p in d.request("GET", "/projects", token=token)[1]["projects"]]


def project_reads(driver: Any, base: str) -> list[str]:
    """The query of each read of the project list the page made since the last call."""
    return [path.split("?", 1)[1] if "?" in path else "" for method, path, _ in network_requests(driver, base)
            if method == "GET" and path.split("?")[0] == "/api/v1/projects"]


def test_a_daemon_of_many_projects_is_polled_a_page_at_a_time_and_shows_new_ones(browser: Any,
                                                                                   tmp_path: Path) -> None:
    """450 projects: the list shows the newest 200 (oldest first, as the daemon lists them) and
    "Show more projects" above them; the 5 s poll reads that page (``order=newest&limit=200``),
    never the whole list; a project made by another client after the page loaded appears within a
    poll; two presses show all 451, each once, in the daemon's order, and the poll then reads the newest
    page, never what is shown."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    (tmp_path / "ws").mkdir()
    write_many_projects(cwd, tmp_path / "ws", 450)
    d = Daemon(cwd)
    try:
        strong = d.pair("dash-projects-writer", strong=True)
        token = d.pair("dash-projects", strong=False)
        driver = browser

        whole = projects_listed(d, token)
        assert len(whole) == 450
        driver.get(d.base + "/")
        network_requests(driver, d.base)
        connect(driver, token)
        wait_for(lambda: len(projects_shown(driver)) == 200 and by_css(driver, "#projects button.more"),
                 "the newest 200")
        assert projects_shown(driver) == whole[-200:]
        # (one read of the list each: it is drawn again at each poll) (above: where the older are)
        assert driver.execute_script("""const li = document.querySelector('#projects > li');
            return li !== null && li.className !== 'empty' && li.querySelector('button.more') !== null""")
        # the newest project is selected, its session listed
        wait_for(lambda: texts(driver, "#sessions button[data-session-id]") != [], "the newest project's session")
        assert attrs(driver, "#projects button.selected", "data-project-id")[:1] == [[whole[-1]]]
        # the poll: at least two more reads after the first, each of the newest page alone
        reads: list[str] = []
        wait_for(lambda: reads.extend(project_reads(driver, d.base)) or len(reads) >= 3, "two polls", timeout=20)
        assert all(q == "order=newest&limit=200" for q in reads), reads
        # a project made after the page loaded appears within a poll, at the end (the newest)
        status, made = d.request("POST", "/projects", {"name": "Made later", "workspace": str(tmp_path / "ws")}, strong)
        assert status == 201, made
        wait_for(lambda: projects_shown(driver)[-1:] == [made["id"]], "the new project", timeout=15)
        whole = projects_listed(d, token)
        assert projects_shown(driver) == whole[-200:]
        # every project is reachable: 200 older, then the 51 left
        click(driver, "#projects button.more")
        wait_for(lambda: len(projects_shown(driver)) == 400, "200 older projects")
        assert projects_shown(driver) == whole[-400:] and by_css(driver, "#projects button.more")
        assert driver.execute_script("return document.activeElement.matches('#projects button.more')")
        click(driver, "#projects button.more")
        wait_for(lambda: len(projects_shown(driver)) == 451, "every project")
        assert projects_shown(driver) == whole and not by_css(driver, "#projects button.more")
        project_reads(driver, d.base)
        reads = []
        wait_for(lambda: reads.extend(project_reads(driver, d.base)) or len(reads) >= 1, "a poll", timeout=15)
        assert all(q.startswith("order=newest&limit=") and int(q.rsplit("=", 1)[1]) <= 1000 for q in reads), reads
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()


def selected_project(driver: Any) -> list[str]:
    return [p for [p] in attrs(driver, "#projects button.row.selected", "data-project-id")]   # (one read: polls redraw the list)


def test_the_selected_project_keeps_its_row_and_more_projects_go_on_from_the_oldest_shown(browser: Any,
                                                                                          tmp_path: Path) -> None:
    """450 projects; the oldest of the newest 200 selected, with a session of its own. Three
    projects made by another client push it out of the newest 200: its row stays, above "Show
    more projects" (older than the rows after it), still selected, its session still listed. A
    press reads the 200 older than the oldest row of the window (``after`` it), the selected one
    among them, shown once; two projects made then are added at the end and nothing leaves the
    list; the next press goes on from the oldest shown, each project once, in the daemon's order.
    After the presses the poll reads the newest page alone, not the 455 shown."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    (tmp_path / "ws").mkdir()
    write_many_projects(cwd, tmp_path / "ws", 450)

    async def one_more_session() -> None:
        async with open_store(cwd / ".lens") as store:
            await store.append(Draft(SessionCreated(model="faux/faux-1", name="kept's"), project_id="prj_0250",
                                     session_id="ses_kept", agent_id="main"))

    trio.run(one_more_session)
    d = Daemon(cwd)
    try:
        strong = d.pair("dash-kept-writer", strong=True)
        token = d.pair("dash-kept", strong=False)
        driver = browser

        def make(name: str) -> str:
            status, made = d.request("POST", "/projects", {"name": name, "workspace": str(tmp_path / "ws")}, strong)
            assert status == 201, made
            return made["id"]

        whole = projects_listed(d, token)
        assert whole[-200] == "prj_0250"
        driver.get(d.base + "/")
        connect(driver, token)
        wait_for(lambda: len(projects_shown(driver)) == 200 and by_css(driver, "#projects button.more"),
                 "the newest 200")
        click(driver, "#projects button[data-project-id='prj_0250']")
        wait_for(lambda: texts(driver, "#sessions button[data-session-id]") != []
                 and selected_project(driver) == ["prj_0250"], "the selected project's session")
        made = [make(f"Made later {i}") for i in range(3)]
        wait_for(lambda: projects_shown(driver)[-3:] == made, "the three new projects", timeout=15)
        whole = projects_listed(d, token)
        assert "prj_0250" not in whole[-200:]
        # its row stays, first (the oldest shown), the button after it (the projects between are left out)
        assert projects_shown(driver) == ["prj_0250"] + whole[-200:]
        assert driver.execute_script("""const items = document.querySelectorAll('#projects > li');
            return items.length > 1 && items[0].querySelector("button[data-project-id='prj_0250']") !== null
                && items[1].querySelector('button.more') !== null""")
        assert selected_project(driver) == ["prj_0250"]
        assert texts(driver, "#project-id") == ["prj_0250"]
        assert attrs(driver, "#sessions button[data-session-id]", "data-session-id") == [["ses_kept"]]
        # "Show more" goes on from the oldest row of the window: the selected row is among the 200 read, once
        network_requests(driver, d.base)
        click(driver, "#projects button.more")
        wait_for(lambda: len(projects_shown(driver)) == 400, "200 older projects")
        assert projects_shown(driver) == whole[-400:] and selected_project(driver) == ["prj_0250"]
        assert f"order=newest&limit=200&after={whole[-200]}" in project_reads(driver, d.base)
        # projects made between presses are added; nothing leaves the list
        later = [make(f"Made between {i}") for i in range(2)]
        wait_for(lambda: projects_shown(driver)[-2:] == later, "the two made between presses", timeout=15)
        whole = projects_listed(d, token)
        assert projects_shown(driver) == whole[-402:]
        click(driver, "#projects button.more")
        wait_for(lambda: len(projects_shown(driver)) == len(whole), "every project")
        assert projects_shown(driver) == whole and not by_css(driver, "#projects button.more")
        # the poll after the presses reads the newest page alone, never what is shown
        project_reads(driver, d.base)
        reads: list[str] = []
        wait_for(lambda: reads.extend(project_reads(driver, d.base)) or len(reads) >= 2, "two polls", timeout=20)
        assert all(q == "order=newest&limit=200" for q in reads), reads
        assert projects_shown(driver) == whole and selected_project(driver) == ["prj_0250"]
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()
