"""What "The dashboard, a user's pass" left: buttons a screen reader heard by their word alone
(several "Stop"s, several "Withdraw"s), a job's stop that waits out a job ignoring SIGTERM with
no word of it, and the session's status pill still saying "running" while the daemon is away.

A real ``lens serve --port 0`` (the faux provider, a real executor, a log in a temporary
directory) and headless Chromium, set up as in ``test_dashboard_browser.py`` (its fixtures and
helpers); the accessible names are the ones Chromium computes. Every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, attrs, becomes, body_data, browser, by_css, click, committed_answers, console_errors, daemon, make_daemon, one, open_session,
    session_starting_jobs, submit, texts, wait_for, with_turns)
from tests.dashboard.test_dashboard_this_round import png_1x1
from tests.dashboard.test_dashboard_users_pass import HOLD_STOPS
from tools.artifacts import ArtifactStore

SLOW = {"when": "stream slowly", "chunks": ["(faux) Streaming the first half… ", "and the rest."],
        "chunkDelayMs": 60000}


def names(driver: Any, selector: str) -> list[str]:
    return [n.accessible_name for n in by_css(driver, selector) if n.is_displayed()]


def names_become(driver: Any, selector: str, expected: list[str]) -> None:
    """Waits until the names of what matches ``selector`` are ``expected`` (:func:`becomes`): a
    panel drawn again between finding its buttons and reading their names (the view's read after
    the stream's events) leaves the found ones stale, so one read is not enough."""
    becomes(lambda: names(driver, selector), expected, f"the names of {selector}")


def announced(driver: Any, selector: str) -> str:
    """The text Chromium's accessibility tree holds inside what matches ``selector`` (a live
    region's announcement is that text): its text nodes the tree does not ignore, joined."""
    driver.execute_cdp_cmd("Accessibility.enable", {})
    doc = driver.execute_cdp_cmd("DOM.getDocument", {"depth": 0})
    node = driver.execute_cdp_cmd("DOM.querySelector", {"nodeId": doc["root"]["nodeId"], "selector": selector})
    tree = driver.execute_cdp_cmd("Accessibility.getPartialAXTree", {"nodeId": node["nodeId"], "fetchRelatives": False})
    said: list[str] = []

    def walk(ax_id: str) -> None:
        for child in driver.execute_cdp_cmd("Accessibility.getChildAXNodes", {"id": ax_id})["nodes"]:
            if child.get("ignored"):
                continue
            if child.get("role", {}).get("value") == "StaticText":
                said.append(child.get("name", {}).get("value", ""))
            walk(child["nodeId"])
    walk(tree["nodes"][0]["nodeId"])
    return "".join(said)


def short(job_id: str) -> str:
    """What the card shows of a job's id without the focus (13 characters)."""
    return job_id[:13]


def start_jobs(make_daemon: Callable[[dict[str, Any]], Daemon], driver: Any, tmp_path: Path, *commands: str,
               turns: tuple[dict[str, Any], ...] = ()) -> list[str]:
    """A session whose first run starts a job per command, each job's Stop shown and the run
    ended: the jobs' ids."""
    *_, jobs = session_starting_jobs(make_daemon, driver, tmp_path, "dash-whose", *commands, turns=turns)
    wait_for(lambda: len(by_css(driver, "#jobs li.card button.job-stop")) == len(commands), "the jobs' Stops")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the run's end")
    return jobs


def test_dashboard_names_each_queued_inputs_and_jobs_buttons_by_whose_they_are(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    driver = browser
    jobs = start_jobs(make_daemon, driver, tmp_path, "sleep 600", "sleep 601", turns=(SLOW,))
    assert len({short(j) for j in jobs}) == 2, jobs
    # (the jobs run: their cards are drawn again as the view's reads come back)
    names_become(driver, "#jobs li.card button.job-stop", [f"Stop job {short(j)}" for j in jobs])
    names_become(driver, "#jobs li.card button.job-output", [f"Output of job {short(j)}" for j in jobs])
    click(driver, f"#jobs li.card[data-job-id='{jobs[0]}'] button.job-output")
    wait_for(lambda: names(driver, "#jobs li.card button.job-output")[0] == f"Hide output of job {short(jobs[0])}",
             "the open output's Hide")
    # (what is seen is still the word alone, which the name begins with)
    assert texts(driver, "#jobs li.card button.job-stop") == ["Stop", "Stop"]

    submit(driver, "stream slowly please")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running", "the slow answer")
    long_text = "a follow-up whose text is longer than a button's name should read aloud"
    submit(driver, "check the tests")
    submit(driver, long_text)
    submit(driver, "steer this way", when_busy="steer")
    wait_for(lambda: len(by_css(driver, "#queue li.card")) == 3, "three queued inputs")
    # (listed in the order they run: the steer goes in at the running task's next round, before
    # the follow-ups, which wait for the task to end)
    names_become(driver, "#queue li.card button.withdraw", [
        "Withdraw queued input “steer this way”",
        "Withdraw queued input “check the tests”",
        "Withdraw queued input “a follow-up whose text is longer than a…”"])
    names_become(driver, "#queue li.card button.steer", [
        "Steer with queued input “check the tests”",
        "Steer with queued input “a follow-up whose text is longer than a…”"])
    assert texts(driver, "#queue li.card button.withdraw") == ["Withdraw"] * 3
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    assert console_errors(driver) == []


def test_dashboard_names_a_queued_input_of_images_alone_by_its_images(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """An input of images and no text was named "queued input “”" in its buttons' names."""
    driver = browser
    d = make_daemon(with_turns(SLOW))
    strong, sid = open_session(driver, d, tmp_path, "dash-images")
    submit(driver, "stream slowly please")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running", "the slow answer")
    aid = ArtifactStore(d.cwd / ".lens" / "artifacts").put(png_1x1())
    image = {"type": "image", "artifactId": aid, "mime": "image/png"}
    for request_id, content in [("two", [image, image]), ("one", [image]), ("worded", [{"type": "text", "text": "see this"}, image])]:
        status, body = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": request_id, "content": content}, token=strong)
        assert status == 202, body
    wait_for(lambda: len(by_css(driver, "#queue li.card")) == 3, "three queued inputs")
    names_become(driver, "#queue li.card button.withdraw", [
        "Withdraw queued input of 2 images", "Withdraw queued input of 1 image", "Withdraw queued input “see this”"])
    names_become(driver, "#queue li.card button.steer", [
        "Steer with queued input of 2 images", "Steer with queued input of 1 image", "Steer with queued input “see this”"])
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    assert console_errors(driver) == []


def test_dashboard_says_stopping_while_a_job_that_ignores_sigterm_is_stopped(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The stop of a job that ignores SIGTERM answers once the SIGKILL after the grace ended it;
    until then the card says "stopping…" (the request is held here, so the wait is the test's)."""
    driver = browser
    command = "trap '' TERM; sleep 600"
    (job,) = start_jobs(make_daemon, driver, tmp_path, command)
    card = f"#jobs li.card[data-job-id='{job}']"
    assert texts(driver, f"{card} .stopping") == []

    driver.execute_script(HOLD_STOPS)
    click(driver, f"{card} button.job-stop")
    wait_for(lambda: driver.execute_script("return window.stopRequests") == 1, "the stop asked")
    wait_for(lambda: texts(driver, f"{card} .stopping") == ["stopping…"], "stopping… on the card")
    # (the running job's card is drawn again when what the view says of it changes: a stale
    # element is found again, the card read whole each time)
    becomes(lambda: (one(driver, f"{card} .stopping").is_displayed(), one(driver, f"{card} button.job-stop").is_enabled(),
                     "running" in one(driver, f"{card} .pill").text), (True, False, True),
            "the card stopping, its Stop disabled, still running")

    driver.execute_script("window.releaseStops()")
    wait_for(lambda: "stopped" in one(driver, f"{card} .pill").text, "the card saying stopped")
    assert texts(driver, f"{card} .stopping") == []
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_dashboard_status_is_not_said_known_while_the_daemon_is_away(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    driver = browser
    d = make_daemon(with_turns(SLOW))
    open_session(driver, d, tmp_path, "dash-away")
    submit(driver, "stream slowly please")
    pill = "#session-status"
    wait_for(lambda: texts(driver, pill) == ["running"], "the running status")
    assert one(driver, pill).get_attribute("title") in (None, "")
    assert announced(driver, pill) == "running"

    d.stop()
    words = "status unknown while reconnecting (last known: running)"
    wait_for(lambda: body_data(driver, "conn") == "reconnecting", "the page reconnecting")
    wait_for(lambda: "unknown" in one(driver, pill).get_attribute("class"), "the status marked unknown")
    # (the eye sees a short pill, its tooltip the words; a screen reader is told the words, once)
    assert texts(driver, f"{pill} [aria-hidden=true]") == ["running?"]
    assert texts(driver, f"{pill} .visually-hidden") == [words]
    assert attrs(driver, f"{pill} [aria-hidden=true]", "title") == [[words]]   # (one read: the pill's parts are drawn again)
    assert announced(driver, pill) == words
    assert one(driver, pill).get_attribute("aria-label") is None

    d.start()
    wait_for(lambda: body_data(driver, "conn") == "live", "the stream back", 20)
    # (the run was cut by the stop and is asked again: running; the view read after says so)
    wait_for(lambda: texts(driver, pill) == [body_data(driver, "sessionStatus")] and texts(driver, pill) == ["running"],
             "the real status back")
    assert one(driver, pill).get_attribute("title") in (None, "")
    assert "unknown" not in one(driver, pill).get_attribute("class")
    assert announced(driver, pill) == "running"
    click(driver, "#abort")
    wait_for(lambda: texts(driver, pill) == ["idle"], "the aborted run's status")
    assert console_errors(driver) == []


def test_dashboard_names_a_queued_input_by_its_first_40_characters_past_the_bmp_too(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A queued input's buttons are named by its first 40 characters: counted in UTF-16 units, a
    letter past the Basic Multilingual Plane (an emoji, a CJK letter of its supplement) counted
    twice, so an input of such letters was named by 20 of them, and one cut after its 39th unit
    ended its name in half a letter (a lone surrogate)."""
    driver = browser
    d = make_daemon(with_turns(SLOW))
    strong, sid = open_session(driver, d, tmp_path, "dash-astral")
    submit(driver, "stream slowly please")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running", "the slow answer")
    emoji, cjk = "\U0001F600", "\U00020BB7"
    inputs = ["x" * 39 + emoji + " and more after it", emoji * 45, cjk * 40]
    for i, text in enumerate(inputs):
        status, body = d.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"astral-{i}", "content": text},
                                 token=strong)
        assert status == 202, body
    wait_for(lambda: len(by_css(driver, "#queue li.card")) == 3, "three queued inputs")
    names_become(driver, "#queue li.card button.withdraw", [
        "Withdraw queued input “" + "x" * 39 + emoji + "…”",
        "Withdraw queued input “" + emoji * 40 + "…”",
        "Withdraw queued input “" + cjk * 40 + "”"])
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    assert console_errors(driver) == []


# Holds every read of the open session's view (`GET /sessions/{id}?…`) until `lensRelease()`: what
# the page shows meanwhile comes from the live stream alone.
HOLD_VIEWS = """
    const real = window.fetch, held = [];
    let holding = true;
    window.lensRelease = () => { holding = false; for (const go of held.splice(0)) go(); };
    window.fetch = (url, init) => {
      if (!holding || !/\\/sessions\\/[^/?]+\\?/.test(String(url))) return real(url, init);
      return new Promise((go) => held.push(go)).then(() => real(url, init));
    };
"""


def test_dashboard_status_pill_says_running_at_the_event_that_begins_the_run(daemon: Daemon, browser: Any,
                                                                             tmp_path: Path) -> None:
    """The pill followed the view alone, read 120 ms or more after each event: an answer streamed
    while the pill still said idle. The input queued is the event that makes an idle session
    running: the pill says so then, with no view read (every read held here)."""
    driver = browser
    pill = "#session-status"
    open_session(driver, daemon, tmp_path, "dash-status-now")
    wait_for(lambda: texts(driver, pill) == ["idle"], "the idle status")
    driver.execute_script(HOLD_VIEWS)
    submit(driver, "hello")
    wait_for(lambda: texts(driver, pill) == ["running"], "the running status with no view read")
    assert "ok" in one(driver, pill).get_attribute("class")
    assert body_data(driver, "sessionStatus") == "idle", "a view was read: the pill may have followed it"
    driver.execute_script("window.lensRelease()")
    # (the run's end is the view's to say: read once released, with the answer)
    wait_for(lambda: "(faux) You said: hello" in committed_answers(driver), "the answer")
    wait_for(lambda: texts(driver, pill) == ["idle"] and body_data(driver, "sessionStatus") == "idle", "idle again")
    assert console_errors(driver) == []


# After it, the page's next connection to the stream waits until ``window.lensConnect()`` and its
# frames until ``window.lensFrames()``; view reads are counted in ``window.lensViews``, and every
# text the status pill shows is recorded in ``window.lensPill``.
HOLD_RECONNECT = """
    const real = window.fetch;
    let connect, frames;
    const connectGate = new Promise((r) => { connect = r; }), framesGate = new Promise((r) => { frames = r; });
    window.lensConnect = () => connect(); window.lensFrames = () => frames();
    window.lensViews = 0; window.lensPill = [];
    new MutationObserver(() => window.lensPill.push(document.getElementById('session-status').textContent))
      .observe(document.getElementById('session-status'), {childList: true, characterData: true, subtree: true});
    window.fetch = async (url, init) => {
      if (/\\/sessions\\/[^/?]+\\?/.test(String(url))) {
        const r = await real(url, init); window.lensViews++; return r;
      }
      if (!String(url).includes('/events/stream')) return real(url, init);
      await connectGate;
      const resp = await real(url, init);
      if (!resp.ok) return resp;
      const reader = resp.body.getReader();
      const body = new ReadableStream({
        async pull(c) { await framesGate; const {done, value} = await reader.read(); if (done) c.close(); else c.enqueue(value); },
        cancel(why) { return reader.cancel(why); }});
      return new Response(body, {status: resp.status, headers: resp.headers});
    };
"""


def test_dashboard_status_pill_stays_idle_for_a_run_a_newer_view_has_seen_end(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The pill says *running* at the event that begins a run, ahead of the view. A view read can be
    newer than the stream: after a reconnect the page reads the view at once while the stream
    replays what it missed. A run that began and ended while the page was away was then said
    *running* at its replayed `input.submitted` (the view already idle after it), until the next
    view read. An event the view in hand already holds changes nothing."""
    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-status-replayed")
    wait_for(lambda: texts(driver, "#session-status") == ["idle"], "the idle status")
    driver.execute_script(HOLD_RECONNECT)
    d.stop()
    wait_for(lambda: body_data(driver, "conn") != "live", "the stream lost")
    d.start()
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "away", "content": "while away"},
                     token=strong)[0] == 202
    wait_for(lambda: d.request("GET", f"/sessions/{sid}", token=strong)[1]["status"] == "idle"
             and d.request("GET", f"/sessions/{sid}", token=strong)[1]["itemsTotal"] == 2, "the run ended, the page away")
    last = d.request("GET", f"/sessions/{sid}", token=strong)[1]["lastSeq"]
    views = driver.execute_script("return window.lensViews")
    driver.execute_script("window.lensConnect()")
    # (the page reconnects and reads the view at once: idle, its last seq past the run's events)
    wait_for(lambda: driver.execute_script("return window.lensViews") > views and body_data(driver, "conn") == "live",
             "the view read at the reconnect")
    wait_for(lambda: "(faux) You said: while away" in committed_answers(driver), "the run's answer from the view")
    views = driver.execute_script("return window.lensViews")
    driver.execute_script("window.lensFrames()")
    wait_for(lambda: int(body_data(driver, "lastEventId") or 0) == last, "the replayed frames taken")
    wait_for(lambda: driver.execute_script("return window.lensViews") > views, "the view read after the frames")
    assert "running" not in driver.execute_script("return window.lensPill"), driver.execute_script("return window.lensPill")
    assert texts(driver, "#session-status") == ["idle"]
    assert console_errors(driver) == []
