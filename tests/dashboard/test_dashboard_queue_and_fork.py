"""The queue panel at the view's window of queued inputs, and the fork a quarantined session's note
offers (F-API-6). One real daemon (the faux provider), one headless Chromium (the helpers of
``test_dashboard_browser.py``); every wait is for a condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from runtime.views import VIEW_QUEUED_MAX
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, browser, by_css, click, committed_answers, console_errors, daemon, make_daemon, one, open_in_page,
    open_session, submit, wait_for, with_turns)
from tests.rawlog import edit_log


def queued_ids(driver: Any) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#queue li.card')].map((li) => li.dataset.requestId)")


def test_the_queue_panel_shows_a_full_window_whole_and_reaches_the_input_past_it(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A session awaiting an answer keeps what is sent meanwhile queued. At the view's window size
    (VIEW_QUEUED_MAX) the panel shows every queued input and no "Show more queued"; one past it the
    view holds the window alone, and the button reads the one left out."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-queue")
    submit(driver, "ask two questions")
    wait_for(lambda: by_css(driver, "#timeline .question"), "the question")
    for i in range(VIEW_QUEUED_MAX):
        assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"q{i}", "content": f"queued {i}"},
                              token=strong)[0] == 202
    want = [f"q{i}" for i in range(VIEW_QUEUED_MAX)]
    wait_for(lambda: queued_ids(driver) == want, "the whole queue")
    assert not by_css(driver, "#queue button[data-more='queued']")

    last = f"q{VIEW_QUEUED_MAX}"
    assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": last, "content": "the last"},
                          token=strong)[0] == 202
    wait_for(lambda: by_css(driver, "#queue button[data-more='queued']"), "Show more queued")
    assert queued_ids(driver) == want
    click(driver, "#queue button[data-more='queued']")
    wait_for(lambda: queued_ids(driver) == want + [last], "the input past the window")
    assert not by_css(driver, "#queue button[data-more='queued']")
    assert console_errors(driver) == []


# Records what the queue panel shows after each redraw (`lensQueueShown`), and withdraws the input
# the script's argument names just before the page's first read of queued inputs past the view's window
# (`queuedStart`): between the two reads of one refresh, as a withdraw from another client can be.
EARLIER_LEAVES = """
    const which = arguments[0];
    window.lensQueueShown = [];
    new MutationObserver(() => window.lensQueueShown.push(
      [...document.querySelectorAll('#queue li.card')].map((li) => li.dataset.requestId)))
      .observe(document.getElementById('queue'), {childList: true});
    const real = window.fetch; let once = true;
    window.fetch = async (url, init) => {
      const m = /\\/sessions\\/([^/?]+)\\?.*queuedStart=/.exec(String(url));
      if (once && m) {
        once = false;
        await real('/api/v1/sessions/' + m[1] + '/inputs/' + which + '/withdraw',
                   {method: 'POST', headers: Object.assign({}, init.headers, {'Content-Type': 'application/json'}), body: '{}'});
        window.lensWithdrawn = true;
      }
      return real(url, init);
    };
"""


def test_the_queue_panel_past_the_window_leaves_out_no_input_when_an_earlier_one_leaves_between_reads(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The panel reads the inputs past the view's window by index. An earlier input that left the
    queue between the view's read and the next page's moved the rest one index down: the page,
    read from the index where the window ended, left out the input right after it. Pages are now
    joined by the last input held (its request id): every input still queued is shown, once, in order."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-queue-leaves")
    submit(driver, "ask two questions")
    wait_for(lambda: by_css(driver, "#timeline .question"), "the question")
    count = VIEW_QUEUED_MAX + 10
    for i in range(count):
        assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"q{i}", "content": f"queued {i}"},
                              token=strong)[0] == 202
    click(driver, "#queue button[data-more='queued']")
    every = [f"q{i}" for i in range(count)]
    wait_for(lambda: queued_ids(driver) == every, "every queued input")

    driver.execute_script(EARLIER_LEAVES, "q5")
    # (a new input: the page reads its view again, the window then the page past it)
    assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": f"q{count}", "content": "the last"},
                          token=strong)[0] == 202
    want = [q for q in every if q != "q5"] + [f"q{count}"]
    wait_for(lambda: driver.execute_script("return window.lensWithdrawn === true"), "the earlier input withdrawn")
    wait_for(lambda: queued_ids(driver) == want, "the queue without the withdrawn input")
    shown = driver.execute_script("return window.lensQueueShown")
    assert shown
    for ids in shown:
        assert len(ids) == len(set(ids)), f"an input shown twice: {ids}"
        missing = [q for q in every if q != "q5" and q not in ids]
        assert missing == [], f"queued inputs left out of the panel: {missing}"
    assert console_errors(driver) == []


def test_the_queue_panel_past_the_window_shows_the_inputs_in_the_order_they_run(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """While a task runs the view lists every steer before the follow-ups (the order they run), so
    a follow-up queued first has a lower seq than the steers before it in the list. Pages joined by
    seq left such follow-ups out past the window; joined by the last input held, the panel shows
    every input once, in the view's order."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-queue-order")
    submit(driver, "ask two questions")
    wait_for(lambda: by_css(driver, "#timeline .question"), "the question")
    follow = [f"f{i}" for i in range(3)]
    steer = [f"s{i}" for i in range(VIEW_QUEUED_MAX + 5)]
    for rid in follow:
        assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": rid, "content": rid},
                              token=strong)[0] == 202
    for rid in steer:
        assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": rid, "content": rid, "whenBusy": "steer"},
                              token=strong)[0] == 202
    view = daemon.request("GET", f"/sessions/{sid}?itemsLimit=1", token=strong)[1]
    assert [q["requestId"] for q in view["queued"]] == steer[:VIEW_QUEUED_MAX]  # (the daemon's order)
    wait_for(lambda: by_css(driver, "#queue button[data-more='queued']"), "Show more queued")
    click(driver, "#queue button[data-more='queued']")
    wait_for(lambda: queued_ids(driver) == steer + follow, "every queued input in the order they run")
    assert console_errors(driver) == []


def fork_offered_and_pressed(driver: Any, sid: str) -> str:
    """Press the quarantine note's fork button once it is offered; the fork's id, once it is open."""
    button = wait_for(lambda: by_css(driver, "#fork-quarantined:enabled"), "the fork offered")[0]
    assert button.is_displayed() and button.text == "Fork from the last good event"
    button.click()
    fork = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId !== arguments[0]"
        " && b.dataset.sessionId", sid), "the fork selected")
    wait_for(lambda: one(driver, "#session-title").text == fork, "the fork opened")
    wait_for(lambda: not one(driver, "#fork-quarantined").is_displayed(), "no fork offered on the fork")
    assert one(driver, "#send").is_enabled() and one(driver, "#input").is_enabled()
    return fork


def test_a_quarantined_sessions_note_forks_it_at_its_last_good_event_and_opens_the_fork(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A watched session whose second input is damaged in the log: after a restart it is
    quarantined and its view cannot be read. The note offers "Fork from the last good event":
    pressed, the page forks it at the event before the damaged one (a fork at or past it is
    EVENT_CORRUPT) and opens the fork, which shows the first exchange and takes input."""
    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-fork-quarantined")
    answered(driver, "the first thing", "the first answer")
    answered(driver, "the second thing", "the second answer")
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    seqs = [e["seq"] for e in events]
    bad = [e["seq"] for e in events if e["kind"] == "input.submitted"][1]
    good = seqs[seqs.index(bad) - 1]
    d.stop()
    edit_log(d.cwd / ".lens", "UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (bad,))
    d.start()
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_QUARANTINED']"), "the refusal to read it", 20)
    fork = fork_offered_and_pressed(driver, sid)
    status, view = d.request("GET", f"/sessions/{fork}", token=strong)
    assert status == 200 and view["forkedFrom"] == {"sessionId": sid, "seq": good}, view
    wait_for(lambda: "(faux) You said: the first thing" in committed_answers(driver), "the fork's first answer")
    assert "(faux) You said: the second thing" not in committed_answers(driver)
    answered(driver, "the fork goes on", "the fork's answer")
    assert console_errors(driver) == []


def test_a_quarantined_session_whose_view_reads_is_forked_at_its_last_event(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A session quarantined with its log whole (its actor failed again and again; here the
    quarantine recorded while the daemon is stopped) still has a view: the note's fork is at its
    last event, the quarantine's own."""
    import trio

    from events.store import Draft, open_store
    from events.types import SessionQuarantined

    driver = browser
    d = make_daemon(with_turns())
    strong, sid = open_session(driver, d, tmp_path, "dash-fork-whole")
    answered(driver, "something to keep", "the answer")
    project = driver.execute_script("return document.querySelector('#projects button.selected').dataset.projectId")
    d.stop()

    async def quarantine() -> int:
        async with open_store(d.cwd / ".lens") as store:
            return (await store.append(Draft(SessionQuarantined(reason="replay failed 3 times"), project_id=project,
                                             session_id=sid))).seq

    last = trio.run(quarantine)
    d.start()
    open_in_page(driver, d, strong, sid)
    wait_for(lambda: one(driver, "#session-status").text == "quarantined", "the session shown quarantined")
    assert not by_css(driver, "#errors li")
    fork = fork_offered_and_pressed(driver, sid)
    status, view = d.request("GET", f"/sessions/{fork}", token=strong)
    assert status == 200 and view["forkedFrom"] == {"sessionId": sid, "seq": last}, view
    wait_for(lambda: "(faux) You said: something to keep" in committed_answers(driver), "the fork's answer")
    assert console_errors(driver) == []
