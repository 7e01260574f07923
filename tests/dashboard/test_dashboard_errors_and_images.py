"""An error body that is not JSON is shown cut at a whole character; an opened image's blob URL is
revoked once the image has left the page; a model failure's entry in the errors list goes when a
later model request of the same agent succeeds, as the timeline's notice does. One real daemon
and one headless Chromium, as in ``test_dashboard_browser.py`` (its fixtures and helpers); every
wait is for a condition."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import trio

from events.store import Draft, open_store
from events.types import ArtifactStored, ModelResponded, ProjectCreated, SessionCreated, ToolCall, ToolFinished, ToolStarted
from tools.artifacts import ArtifactStore
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, answered, body_data, browser, by_css, click, connect, console_errors, daemon, one, open_session, submit, texts, wait_for)
from tests.web.server import png


def write_image_sessions(cwd: Path, workspace: Path) -> str:
    """Sessions ``ses_img`` (a call whose result saved a PNG, call ``call_img``) and ``ses_other``
    (empty) of one project; the image's artifact id."""
    store = ArtifactStore(cwd / ".lens" / "artifacts")
    image = png(2, 1)
    aid = store.put(image)

    async def write() -> None:
        ids = {"project_id": "prj_img", "session_id": "ses_img", "agent_id": "main"}
        async with open_store(cwd / ".lens") as log:
            await log.append(Draft(ProjectCreated(name="Images", workspace=str(workspace)), project_id="prj_img"))
            await log.append(Draft(SessionCreated(model="faux/faux-1"), **ids))
            await log.append(Draft(SessionCreated(model="faux/faux-1"), project_id="prj_img", session_id="ses_other"))
            await log.append(Draft(ModelResponded(tool_calls=[ToolCall(call_id="call_img", name="web_fetch", arguments="{}")],
                                                  stop_reason="tool_use"), **ids))
            await log.append(Draft(ToolStarted(call_id="call_img", name="web_fetch", arguments="{}"), **ids))
            await log.append(Draft(ArtifactStored(artifact_id=aid, sha256=aid, mime="image/png", size=len(image),
                                                  source="web_fetch"), **ids))
            await log.append(Draft(ToolFinished(call_id="call_img", name="web_fetch", content=[],
                                                structured_content={"artifact_id": aid, "sha256": aid, "mime": "image/png",
                                                                    "size": len(image)}), **ids))

    trio.run(write)
    return aid


def shown_errors(driver: Any) -> list[str]:
    """The codes of the errors the list shows (those on screen), in its order."""
    return driver.execute_script("return [...document.querySelectorAll('#errors li')]"
                                 ".filter((li) => li.getClientRects().length > 0).map((li) => li.dataset.code)")


def selected_session(driver: Any) -> str | None:
    return driver.execute_script("const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId")


BUTTON = "#timeline .tool[data-call-id='call_img'] button.artifact"
IMAGE = "#timeline .tool[data-call-id='call_img'] img.artifact-image"

# Answers the next read of an artifact with a 502 whose body is plain text (as a proxy in front of
# the daemon would send): 299 letters, then a letter past the BMP (two UTF-16 units), then more.
NOT_JSON = """
    const real = window.fetch; let once = true;
    window.fetch = (url, init) => {
      if (!once || !/\\/artifacts\\//.test(String(url))) return real(url, init);
      once = false;
      return Promise.resolve(new Response("x".repeat(299) + "\\u{1F600}" + "y".repeat(50),
                                          {status: 502, headers: {"Content-Type": "text/plain"}}));
    };
"""

# Whether a blob URL still reads as an image (a revoked one does not): its width, else null. (An
# image, as the page's policy lets it load blob URLs as images alone.)
READS = """
    const done = arguments[arguments.length - 1], img = new Image();
    img.onload = () => done(img.naturalWidth); img.onerror = () => done(null);
    img.src = arguments[0];
"""


@contextmanager
def image_session(driver: Any, tmp_path: Path) -> Iterator[None]:
    """A daemon on a log holding ``write_image_sessions``'s sessions, ``ses_img`` opened in the
    page (read-only)."""
    cwd, workspace = tmp_path / "daemon", tmp_path / "workspace"
    cwd.mkdir()
    workspace.mkdir()
    write_image_sessions(cwd, workspace)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-errors-images", strong=False)
        driver.get(d.base + "/")
        connect(driver, token)
        click(driver, "#projects button")
        click(driver, "#sessions button[data-session-id='ses_img']")
        wait_for(lambda: by_css(driver, BUTTON), "the image's button")
        yield
    finally:
        d.stop()


def test_dashboard_cuts_an_error_body_that_is_not_json_at_a_whole_character(browser: Any, tmp_path: Path) -> None:
    driver = browser
    with image_session(driver, tmp_path):
        # An error body that is not JSON: its first 300 characters (code points), never half a letter.
        driver.execute_script(NOT_JSON)
        click(driver, BUTTON)
        li = wait_for(lambda: by_css(driver, "#errors li[data-code='HTTP_502']"), "the plain-text error")[0]
        # (a text with half a letter cannot even be handed back to the test: it is named as such)
        shown = driver.execute_script("""
          return [arguments[0].querySelector('.message').textContent, arguments[0].dataset.message].map(
            m => m.isWellFormed() ? m : "half a letter, at UTF-16 unit " + (m.length - 1));""", li)
        assert shown == ["x" * 299 + "\U0001F600…"] * 2, [m[-5:] for m in shown]
        assert console_errors(driver) == []


def test_dashboard_revokes_an_image_blob_url_once_the_image_has_left_the_page(browser: Any, tmp_path: Path) -> None:
    driver = browser
    with image_session(driver, tmp_path):
        # The image opened holds a blob URL; opened again, the first is revoked; the session left,
        # the second is.
        click(driver, BUTTON)
        first = wait_for(lambda: [i.get_attribute("src") for i in by_css(driver, IMAGE)], "the image shown")[0]
        assert first.startswith("blob:")
        assert driver.execute_async_script(READS, first) == 2
        click(driver, BUTTON)
        second = wait_for(lambda: [s for i in by_css(driver, IMAGE) if (s := i.get_attribute("src")) != first],
                          "the image shown again")[0]
        assert len(by_css(driver, IMAGE)) == 1
        assert driver.execute_async_script(READS, first) is None, "the replaced image's blob URL still reads"
        assert driver.execute_async_script(READS, second) == 2
        click(driver, "#sessions button[data-session-id='ses_other']")
        wait_for(lambda: not by_css(driver, IMAGE), "the session left")
        assert driver.execute_async_script(READS, second) is None, "the left session's image blob URL still reads"
        assert console_errors(driver) == []


def test_dashboard_drops_a_model_failure_from_the_errors_once_a_later_request_succeeds(daemon: Daemon, browser: Any,
                                                                                         tmp_path: Path) -> None:
    driver = browser
    _, sid = open_session(driver, daemon, tmp_path, "dash-failure-gone")
    submit(driver, "fail now please")
    wait_for(lambda: by_css(driver, "#errors li[data-code='PROVIDER_ERROR']"), "the failure in the errors list")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed"), "the failure in the timeline")
    # An error that is no model failure stays.
    driver.execute_script(refuse_compaction(409, "SESSION_BUSY"))
    click(driver, "#compact")
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_BUSY']"), "the other error")
    assert shown_errors(driver) == ["PROVIDER_ERROR", "SESSION_BUSY"]
    answered(driver, "hello again", "the later answer")
    wait_for(lambda: not by_css(driver, "#timeline .msg.failed"), "the timeline's notice gone")
    wait_for(lambda: not by_css(driver, "#errors li[data-code='PROVIDER_ERROR']"), "the errors list's entry gone")
    assert shown_errors(driver) == ["SESSION_BUSY"]
    assert console_errors(driver) == []


def refuse_compaction(status: int, code: str, held: bool = False) -> str:
    """A script after which the next compaction the page asks is refused (``status``, ``code``),
    as a daemon would; ``held``: only once ``window.lensRelease()`` is called (a daemon slow to
    answer: the answer comes after the session is left)."""
    answer = (f"new Response(JSON.stringify({{error: {{code: {code!r}, message: 'refused'}}}}),"
              f" {{status: {status}, headers: {{'Content-Type': 'application/json'}}}})")
    return f"""
    const real = window.fetch; let once = true, release;
    const gate = {"new Promise((r) => { release = r; })" if held else "Promise.resolve()"};
    window.lensRelease = () => release();
    window.fetch = (url, init) => {{
      if (!once || !/\\/compact$/.test(String(url))) return real(url, init);
      once = false;
      return gate.then(() => {answer});
    }};"""


HELD_REFUSAL = refuse_compaction(409, "SESSION_BUSY", held=True)
CREDENTIAL_REFUSED = refuse_compaction(401, "AUTH_INVALID")


def test_dashboard_errors_list_shows_the_errors_of_the_session_in_view_and_the_pages_own(daemon: Daemon, browser: Any,
                                                                                          tmp_path: Path) -> None:
    """An error of a session (a request about it, its model failure) is shown while that session
    is in view: another session opened, it is out of sight, and back when its session is opened
    again (a model failure's entry is gone then: the timeline's notice says it). An error of the
    page itself (a project refused) stays whatever the session. The answer to a request of the
    session left, coming after it was left, is that session's too."""
    driver = browser
    _, first = open_session(driver, daemon, tmp_path, "dash-errors-in-view")
    submit(driver, "fail now please")
    wait_for(lambda: by_css(driver, "#errors li[data-code='PROVIDER_ERROR']"), "the failure in the errors list")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed"), "the failure in the timeline")
    # The page's own error: a project whose workspace no agent may have.
    one(driver, "#project-name").send_keys("Refused")
    one(driver, "#project-workspace").send_keys("/")
    click(driver, "#new-project button")
    wait_for(lambda: "WORKSPACE_INVALID" in shown_errors(driver), "the page's error")
    # A compaction of this session, refused only once the next session is open.
    driver.execute_script(HELD_REFUSAL)
    click(driver, "#compact")
    assert shown_errors(driver) == ["PROVIDER_ERROR", "WORKSPACE_INVALID"]

    click(driver, "#new-session button")
    wait_for(lambda: selected_session(driver) not in (None, first), "the other session")
    wait_for(lambda: body_data(driver, "conn") == "live", "the other session live")
    assert shown_errors(driver) == ["WORKSPACE_INVALID"], "the first session's errors shown in the second"
    driver.execute_script("window.lensRelease()")
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_BUSY']"), "the late refusal")
    assert shown_errors(driver) == ["WORKSPACE_INVALID"], "the first session's late refusal shown in the second"
    one(driver, "#input").send_keys("   ")
    click(driver, "#send")   # (a blank message: this session's own refusal, INVALID_ARGUMENT)
    wait_for(lambda: shown_errors(driver) == ["WORKSPACE_INVALID", "INVALID_ARGUMENT"], "the second session's error")

    click(driver, f"#sessions button[data-session-id='{first}']")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed"), "the first session again, its failure in the timeline")
    wait_for(lambda: shown_errors(driver) == ["WORKSPACE_INVALID", "SESSION_BUSY"], "the first session's errors back")
    assert not by_css(driver, "#errors li[data-code='PROVIDER_ERROR']")
    # Dismissed, an error is gone for good; the page's stays.
    click(driver, "#errors li[data-code='SESSION_BUSY'] button")
    wait_for(lambda: shown_errors(driver) == ["WORKSPACE_INVALID"], "the first session's error dismissed")
    # A credential refused on a session's route is the page's error: the credential forgotten, no
    # session is open, and the refusal is shown.
    driver.execute_script(CREDENTIAL_REFUSED)
    click(driver, "#compact")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential forgotten")
    wait_for(lambda: shown_errors(driver) == ["AUTH_INVALID"], "the refusal shown")
    assert console_errors(driver) == []


def kept_errors(driver: Any) -> list[str]:
    """The sessions of every error the list holds, shown or not, in its order."""
    return driver.execute_script("return [...document.querySelectorAll('#errors li')].map((li) => li.dataset.session)")


def test_dashboard_keeps_the_errors_of_the_eight_other_sessions_whose_errors_came_last(daemon: Daemon, browser: Any,
                                                                                        tmp_path: Path) -> None:
    """Another session's errors are kept out of sight (four of each); a page open for days across
    many sessions kept them for every session it had seen. Those of the eight other sessions whose
    errors came last are kept now: a ninth's error drops the oldest session's."""
    driver = browser
    _, first = open_session(driver, daemon, tmp_path, "dash-errors-kept")
    sessions = [first]
    for i in range(9):
        one(driver, "#input").send_keys("   ")
        click(driver, "#send")   # (a blank message: this session's own refusal, INVALID_ARGUMENT)
        wait_for(lambda: shown_errors(driver) == ["INVALID_ARGUMENT"], f"session {i}'s error")
        click(driver, "#new-session button")
        wait_for(lambda: selected_session(driver) not in (None, *sessions), f"session {i + 1}")
        wait_for(lambda: body_data(driver, "conn") == "live", f"session {i + 1} live")
        sessions.append(selected_session(driver))
        assert shown_errors(driver) == [], "another session's error shown"
        # (eight kept at most: after the ninth session's error is out of sight, the first's went)
        wait_for(lambda: kept_errors(driver) == sessions[max(0, i - 7):i + 1], f"the errors kept after session {i}")
    click(driver, f"#sessions button[data-session-id='{sessions[1]}']")
    wait_for(lambda: shown_errors(driver) == ["INVALID_ARGUMENT"], "the second session's error shown again")
    click(driver, f"#sessions button[data-session-id='{first}']")
    wait_for(lambda: selected_session(driver) == first and body_data(driver, "conn") == "live", "the first session again")
    assert shown_errors(driver) == [], "the first session's error, past the bound, kept"
    assert console_errors(driver) == []
