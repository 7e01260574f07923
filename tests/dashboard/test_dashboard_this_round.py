"""The dashboard shows what the daemon's answers now say (docs/decisions.md, "The dashboard
catches up with this round"): a view's agents cut to ``VIEW_AGENTS_MAX`` with ``agentsTotal``,
a 503's ``Retry-After``, and artifacts by their served type. One real daemon and one headless
Chromium, as in ``test_dashboard_browser.py`` (its helpers); every wait is for a condition."""

from __future__ import annotations

import subprocess
import sys
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import trio

from events.store import Draft, open_store
from events.types import (AgentFinished, AgentStarted, ArtifactStored, ModelResponded, ProjectCreated, SessionCreated,
                          TextPart, ToolCall, ToolFinished, ToolStarted)
from runtime.views import VIEW_AGENTS_MAX
from tools.artifacts import ArtifactStore
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    COUNT_STREAMS, Daemon, attrs, body_data, browser, by_css, click, connect, console_errors, daemon, open_in_page,
    open_session, stream_requests, texts, wait_for)


def write_sessions_with_agents(cwd: Path, workspace: Path, subagents: dict[str, int]) -> None:
    """A log of one project whose sessions (id -> how many) ran that many subagents, all finished."""

    async def write() -> None:
        async with open_store(cwd / ".lens") as store:
            await store.append(Draft(ProjectCreated(name="Agents", workspace=str(workspace)), project_id="prj_ag"))
            for sid, n in subagents.items():
                await store.append(Draft(SessionCreated(model="faux/faux-1"), project_id="prj_ag", session_id=sid,
                                         agent_id="main"))
                for i in range(n):
                    aid = f"sub_call_{i}"
                    await store.append(Draft(AgentStarted(parent_agent_id="main", parent_call_id=f"call_{i}",
                                                          prompt=f"job {i}"),
                                             project_id="prj_ag", session_id=sid, agent_id=aid))
                    await store.append(Draft(AgentFinished(status="completed", result="ok"),
                                             project_id="prj_ag", session_id=sid, agent_id=aid))

    trio.run(write)


def test_the_agents_pane_says_when_earlier_agents_are_left_out(browser: Any, tmp_path: Path) -> None:
    """At the bound (the main agent and 99 subagents) the pane lists them all and says nothing
    more; one past it and far past it, it says how many of how many it shows."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sessions = {"ses_at": VIEW_AGENTS_MAX - 1, "ses_past": VIEW_AGENTS_MAX, "ses_many": 136}
    write_sessions_with_agents(cwd, workspace, sessions)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-agents-bound", strong=False)
        driver = browser
        driver.get(d.base + "/")
        connect(driver, token)
        click(driver, "#projects button")
        for sid, total, note in [("ses_past", VIEW_AGENTS_MAX + 1, "showing 100 of 101 agents"),
                                 ("ses_at", VIEW_AGENTS_MAX, None),
                                 ("ses_many", 137, "showing 100 of 137 agents")]:
            status, view = d.request("GET", f"/sessions/{sid}", token=token)
            assert status == 200 and view["agentsTotal"] == total and len(view["agents"]) == VIEW_AGENTS_MAX
            click(driver, f"#sessions button[data-session-id='{sid}']")
            wait_for(lambda: texts(driver, "#session-id") == [sid]
                     and len(by_css(driver, "#agents li.card")) == VIEW_AGENTS_MAX, f"the agents of {sid}")
            # (the latest to finish are listed: the oldest are the ones left out)
            cards = texts(driver, "#agents li.card > span:first-child")
            assert cards[0].startswith("main ") and cards[-1].startswith(f"sub_call_{total - 2} ")
            if note is None:
                assert not by_css(driver, "#agents li.more"), texts(driver, "#agents li.more")
            else:
                wait_for(lambda: texts(driver, "#agents li.more") and texts(driver, "#agents li.more")[0].startswith(note),
                         f"the note on {sid}'s agents left out")
                # (said where the list begins: the ones left out are the earliest)
                assert attrs(driver, "#agents > li", "class")[:1] == [["more"]]   # (one read: view reads redraw the list)
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()


# Answers the page's stream requests with the daemon's own 503 (what ``error_response`` sends for
# SESSION_UNAVAILABLE) while ``window.unavailable`` is true, and records when each was asked.
STREAM_UNAVAILABLE = """
    window.unavailable = true; window.streamAsked = [];
    const real = window.fetch;
    window.fetch = (url, init) => {
      if (!String(url).includes('/events/stream')) return real(url, init);
      window.streamAsked.push(performance.now());
      if (!window.unavailable) return real(url, init);
      return Promise.resolve(new Response(JSON.stringify({error: {code: "SESSION_UNAVAILABLE",
          message: "the session's actor is restarting"}}),
        {status: 503, headers: {"Content-Type": "application/json", "Retry-After": arguments[0]}}));
    };
    window.lensDashboard.dropStream();
"""


def test_the_live_stream_waits_as_long_as_a_503s_retry_after_says(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A 503 with ``Retry-After: 3`` is asked again 3 s later, not after the page's own half a
    second; the pill says when; once the daemon answers, the page is live again."""
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-retry-after")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    driver.execute_script(STREAM_UNAVAILABLE, "3")
    # (the pill says when the page asks again: its own backoff would say 1s)
    wait_for(lambda: texts(driver, "#conn") == ["reconnecting in 3s"], "the wait the daemon asked for, shown")
    assert "SESSION_UNAVAILABLE" in (driver.find_element("css selector", "#conn").get_attribute("title") or "")
    wait_for(lambda: len(driver.execute_script("return window.streamAsked")) >= 2, "two refused tries", timeout=20)
    asked = driver.execute_script("return window.streamAsked")
    assert asked[1] - asked[0] >= 2900, asked  # (ms: the page's own backoff would be 1000)
    driver.execute_script("window.unavailable = false")
    started = time.monotonic()
    wait_for(lambda: body_data(driver, "conn") == "live", "live again once the daemon answers", timeout=20)
    assert time.monotonic() - started < 10
    assert not console_errors(driver)


def test_a_revoked_credential_ends_the_live_stream_with_a_clear_message_and_no_retry(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The real ``lens pair revoke`` while the page watches an idle session (no request of its own
    due: the list poll is far off): the stream's own end tells the page, which says the credential
    was revoked, asks for a new one, and never tries the stream again."""
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-revoked")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    reconnects = body_data(driver, "reconnects")
    driver.execute_script(COUNT_STREAMS)
    subprocess.run([sys.executable, "-m", "runtime.cli", "pair", "revoke", "--client", "dash-revoked"],
                   cwd=daemon.cwd, capture_output=True, text=True, timeout=30, check=True)
    revoked = time.monotonic()
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the revocation shown")
    # (from the stream's end, at once: the list poll, 5 s apart, would have been later)
    assert time.monotonic() - revoked < 3
    said = " ".join(texts(driver, "#errors li"))
    assert "revoked" in said and "paste a new one" in said, said
    assert body_data(driver, "conn") == "offline" and body_data(driver, "reconnects") == reconnects
    wait_for(lambda: by_css(driver, "#cred") and by_css(driver, "#cred")[0].is_displayed(), "the credential form")
    deadline = time.monotonic() + 1.5  # an observation window: the stream is not asked again
    while time.monotonic() < deadline:
        assert stream_requests(driver) == 0
        time.sleep(0.1)
    assert not console_errors(driver)


HTML_TEXT = "<h1 id=injected-h1>not a heading</h1><img src=x onerror=\"window.injected=1\"><script>window.injected=2</script> é ✓\n"
BINARY = bytes(range(256)) * 4
TEXT_SHOWN = 256 * 1024  # the bytes of a text artifact the page shows


def png_1x1() -> bytes:
    """A valid 1×1 RGB PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0")) + chunk(b"IEND", b""))


def test_a_tool_results_artifact_opens_by_its_served_type(browser: Any, tmp_path: Path) -> None:
    """A result naming an artifact offers it: text (HTML markup included) is shown as text in the
    card, an image as an image, bytes are downloaded under the served file name; nothing of them
    runs or renders as markup in the page."""
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    store = ArtifactStore(cwd / ".lens" / "artifacts")
    kinds = {"text": HTML_TEXT.encode(), "binary": BINARY, "image": png_1x1(),
             "at": b"a" * TEXT_SHOWN, "past": b"a" * TEXT_SHOWN + b"b"}  # (the text shown: at its limit, one past)
    aids = {k: store.put(v) for k, v in kinds.items()}

    async def write() -> None:
        ids = {"project_id": "prj_art", "session_id": "ses_art", "agent_id": "main"}
        async with open_store(cwd / ".lens") as log:
            await log.append(Draft(ProjectCreated(name="Artifacts", workspace=str(workspace)), project_id="prj_art"))
            await log.append(Draft(SessionCreated(model="faux/faux-1"), **ids))
            calls = [ToolCall(call_id=f"call_{k}", name="web_fetch", arguments="{}") for k in kinds]
            await log.append(Draft(ModelResponded(tool_calls=calls, stop_reason="tool_use"), **ids))
            for k, data in kinds.items():
                aid, mime = aids[k], {"binary": "application/pdf", "image": "image/png"}.get(k, "application/x-page")
                await log.append(Draft(ToolStarted(call_id=f"call_{k}", name="web_fetch", arguments="{}"), **ids))
                await log.append(Draft(ArtifactStored(artifact_id=aid, sha256=aid, mime=mime, size=len(data),
                                                      source="web_fetch"), **ids))
                await log.append(Draft(ToolFinished(call_id=f"call_{k}", name="web_fetch", content=[TextPart(f"saved as artifact {aid}")],
                                                    structured_content={"artifact_id": aid, "sha256": aid, "mime": mime,
                                                                        "size": len(data)}), **ids))

    trio.run(write)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-artifacts", strong=False)
        driver = browser
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        open_in_page(driver, d, token, "ses_art")
        card = "#timeline .tool[data-call-id='call_{}']"
        wait_for(lambda: all(by_css(driver, card.format(k) + " button.artifact") for k in kinds), "each result's artifact")
        # (a control as every other: at least 24×24 px)
        assert driver.execute_script("""return Array.from(document.querySelectorAll('button.artifact'))
            .every((b) => { const r = b.getBoundingClientRect(); return r.width >= 24 && r.height >= 24; })""")

        click(driver, card.format("text") + " button.artifact")
        wait_for(lambda: driver.execute_script(
            f"return Array.from(document.querySelectorAll(\"{card.format('text')} pre.artifact-text\"), (n) => n.textContent)")
            == [HTML_TEXT], "the text artifact shown as text, whole")
        for k in ("at", "past"):
            click(driver, card.format(k) + " button.artifact")
        shown = f"return Array.from(document.querySelectorAll(\"{card}  pre.artifact-text\"), (n) => n.textContent.length)"
        wait_for(lambda: driver.execute_script(shown.format("at")) == [TEXT_SHOWN]
                 and driver.execute_script(shown.format("past")) == [TEXT_SHOWN], "the long texts shown")
        assert not by_css(driver, card.format("at") + " .artifact-note")
        assert texts(driver, card.format("past") + " .artifact-note") == [f"the first {TEXT_SHOWN} of {TEXT_SHOWN + 1} bytes"]
        click(driver, card.format("image") + " button.artifact")
        wait_for(lambda: driver.execute_script(
            f"const i = document.querySelector(\"{card.format('image')} img.artifact-image\");"
            "return !!i && i.complete && i.naturalWidth === 1 && i.src.startsWith('blob:')"), "the image artifact shown")
        click(driver, card.format("binary") + " button.artifact")
        name = aids["binary"][:16] + ".bin"
        wait_for(lambda: (downloads / name).is_file() and (downloads / name).read_bytes() == BINARY, "the binary downloaded")
        assert not list(downloads.glob("*.crdownload"))

        assert driver.execute_script("return window.injected ?? null") is None
        assert not by_css(driver, "#injected-h1, #timeline script, #timeline img:not(.artifact-image)")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
    finally:
        d.stop()
