"""What the dashboard reads, after "The dashboard catches up with this round" (docs/decisions.md,
"The dashboard and the answers it reads: what the last passes left"): the list poll waits out a
503's ``Retry-After``; an artifact's text is read as a range of what is shown; an artifact a
result names in its text alone has its button when the daemon holds it; a PDF is downloaded as
one. One real daemon and one headless Chromium, as in ``test_dashboard_browser.py`` (its
helpers); every wait is for a condition."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import trio

from events.store import Draft, open_store
from events.types import (ArtifactStored, ModelResponded, ProjectCreated, SessionCreated, TextPart, ToolCall,
                          ToolFinished, ToolStarted)
from tools.artifacts import ArtifactStore
from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, connect, console_errors, daemon, texts, wait_for)

# Answers the page's reads of the project list (whole or a page) with the daemon's own 503 (what
# ``error_response`` sends for PROJECTION_STALLED) while ``window.unavailable`` is true, and records when each was asked.
LISTS_UNAVAILABLE = """
    window.unavailable = true; window.listsAsked = [];
    const real = window.fetch, after = arguments[0];
    window.fetch = (url, init) => {
      if (!/\\/api\\/v1\\/projects(\\?|$)/.test(String(url))) return real(url, init);
      window.listsAsked.push(performance.now());
      if (!window.unavailable) return real(url, init);
      return Promise.resolve(new Response(JSON.stringify({error: {code: "PROJECTION_STALLED",
          message: "projections are catching up with the log (at seq 1 of 2); try again shortly"}}),
        {status: 503, headers: {"Content-Type": "application/json", "Retry-After": after}}));
    };
"""


def test_the_list_poll_waits_as_long_as_a_503s_retry_after_says(daemon: Daemon, browser: Any) -> None:
    """The lists are read every 5 s; a 503 with ``Retry-After: 8`` puts the next read 8 s after
    it (it was 5 s, whatever the daemon asked), and the poll goes on 5 s apart once answered."""
    driver = browser
    token = daemon.pair("dash-lists-retry", strong=False)
    driver.get(daemon.base + "/")
    connect(driver, token)
    wait_for(lambda: body_data(driver, "trust") == "read", "the page connected")
    driver.execute_script(LISTS_UNAVAILABLE, "8")
    wait_for(lambda: by_css(driver, "#errors li[data-code='PROJECTION_STALLED']"), "the poll's read refused", timeout=10)
    driver.execute_script("window.unavailable = false")
    wait_for(lambda: len(driver.execute_script("return window.listsAsked")) >= 3, "two reads more", timeout=25)
    asked = driver.execute_script("return window.listsAsked")
    assert asked[1] - asked[0] >= 7900, asked  # (ms: the poll's own beat would be 5000)
    assert asked[2] - asked[1] >= 4900, asked
    assert not console_errors(driver)


TEXT_SHOWN = 256 * 1024  # the bytes of a text artifact the page shows

# Records each read of an artifact: the range it asked for, the status and how many bytes came.
RECORD_ARTIFACT_READS = """
    window.artifactReads = [];
    const real = window.fetch;
    window.fetch = async (url, init) => {
      const resp = await real(url, init);
      const m = /\\/api\\/v1\\/artifacts\\/([0-9a-f]{64})$/.exec(String(url));
      if (m) window.artifactReads.push({id: m[1], range: (init && init.headers && init.headers.Range) || null,
                                        status: resp.status, size: (await resp.clone().arrayBuffer()).byteLength});
      return resp;
    };
"""


BIG = bytes(range(256)) * 1200  # (300 KiB of bytes, no text)
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"
NAMED = "named in the text alone \u2713\n".encode()
MISSING = "f" * 64  # (no artifact's id)


def write_artifacts_session(cwd: Path, workspace: Path) -> dict[str, str]:
    """Session ``ses_read``: results saving a text one byte past what the page shows, 300 KiB of
    bytes and a PDF (each with its ``artifact.stored`` and ``structuredContent.artifact_id``),
    one naming a stored text in its text alone, one naming 64 hex digits no artifact has (calls
    ``call_<key>``). The artifacts' ids by key."""
    store = ArtifactStore(cwd / ".lens" / "artifacts")
    aids = {"past": store.put(b"a" * TEXT_SHOWN + b"b"), "big": store.put(BIG), "pdf": store.put(PDF),
            "named": store.put(NAMED)}

    async def write() -> None:
        ids = {"project_id": "prj_read", "session_id": "ses_read", "agent_id": "main"}
        async with open_store(cwd / ".lens") as log:
            await log.append(Draft(ProjectCreated(name="Reads", workspace=str(workspace)), project_id="prj_read"))
            await log.append(Draft(SessionCreated(model="faux/faux-1"), **ids))
            calls = ["past", "big", "pdf", "named", "missing"]
            await log.append(Draft(ModelResponded(tool_calls=[ToolCall(call_id=f"call_{k}", name="web_fetch", arguments="{}")
                                                              for k in calls], stop_reason="tool_use"), **ids))
            for k in ("past", "big", "pdf"):
                aid = aids[k]
                mime = "application/pdf" if k == "pdf" else "text/plain"
                size = len(store.get(aid))
                await log.append(Draft(ToolStarted(call_id=f"call_{k}", name="web_fetch", arguments="{}"), **ids))
                await log.append(Draft(ArtifactStored(artifact_id=aid, sha256=aid, mime=mime, size=size,
                                                      source="web_fetch"), **ids))
                await log.append(Draft(ToolFinished(call_id=f"call_{k}", name="web_fetch", content=[TextPart(f"saved as artifact {aid}")],
                                                    structured_content={"artifact_id": aid, "sha256": aid, "mime": mime,
                                                                        "size": size}), **ids))
            for k, text in [("named", f"[resource: text/plain, {len(NAMED)} bytes, saved as artifact {aids['named']}]"),
                            ("missing", f"sha256 of the file: {MISSING}")]:
                await log.append(Draft(ToolStarted(call_id=f"call_{k}", name="web_fetch", arguments="{}"), **ids))
                await log.append(Draft(ToolFinished(call_id=f"call_{k}", name="web_fetch", content=[TextPart(text)]), **ids))

    trio.run(write)
    return aids


CARD = "#timeline .tool[data-call-id='call_{}']"


@contextmanager
def artifacts_session(driver: Any, tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A daemon on a log holding ``write_artifacts_session``'s session, that session opened in the
    page (read-only, its artifact reads recorded, its downloads saved to a folder of their own):
    (the artifacts' ids by key, the downloads' folder)."""
    cwd, workspace, downloads = tmp_path / "daemon", tmp_path / "workspace", tmp_path / "downloads"
    for p in (cwd, workspace, downloads):
        p.mkdir()
    aids = write_artifacts_session(cwd, workspace)
    d = Daemon(cwd)
    try:
        token = d.pair("dash-artifact-reads", strong=False)
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.get(d.base + "/")
        driver.execute_script(RECORD_ARTIFACT_READS)
        connect(driver, token)
        click(driver, "#projects button")
        click(driver, "#sessions button[data-session-id='ses_read']")
        wait_for(lambda: by_css(driver, CARD.format("pdf") + " button.artifact"), "the session's results")
        yield aids, downloads
    finally:
        d.stop()


def artifact_reads(driver: Any, aid: str) -> list[dict[str, Any]]:
    return [r for r in driver.execute_script("return window.artifactReads") if r["id"] == aid]


def test_an_artifact_is_read_as_far_as_it_is_shown(browser: Any, tmp_path: Path) -> None:
    """A text one byte past what is shown is read as a range of what is shown (it was read
    whole); bytes larger than that are read again whole to be downloaded; a PDF stored as one is
    downloaded as ``.pdf`` (it was ``.bin``)."""
    driver = browser
    with artifacts_session(driver, tmp_path) as (aids, downloads):
        click(driver, CARD.format("past") + " button.artifact")
        wait_for(lambda: texts(driver, CARD.format("past") + " .artifact-note") == [f"the first {TEXT_SHOWN} of {TEXT_SHOWN + 1} bytes"],
                 "the long text shown, cut")
        assert artifact_reads(driver, aids["past"]) == [{"id": aids["past"], "range": f"bytes=0-{TEXT_SHOWN - 1}",
                                                          "status": 206, "size": TEXT_SHOWN}]
        assert driver.execute_script(f"return document.querySelector(\"{CARD.format('past')} pre.artifact-text\")"
                                     ".textContent") == "a" * TEXT_SHOWN

        click(driver, CARD.format("big") + " button.artifact")
        name = aids["big"][:16] + ".bin"
        wait_for(lambda: (downloads / name).is_file() and (downloads / name).read_bytes() == BIG, "the large bytes downloaded")
        assert [(r["range"], r["status"], r["size"]) for r in artifact_reads(driver, aids["big"])] == [
            (f"bytes=0-{TEXT_SHOWN - 1}", 206, TEXT_SHOWN), (None, 200, len(BIG))]

        click(driver, CARD.format("pdf") + " button.artifact")
        name = aids["pdf"][:16] + ".pdf"
        wait_for(lambda: (downloads / name).is_file() and (downloads / name).read_bytes() == PDF, "the PDF downloaded as one")
        assert texts(driver, CARD.format("pdf") + " .artifact-note") == [f"downloaded as {name} ({len(PDF)} bytes)"]
        assert not list(downloads.glob("*.crdownload"))
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)


def test_an_artifact_named_in_a_results_text_alone_has_its_button_if_it_is_stored(browser: Any, tmp_path: Path) -> None:
    """A result naming a stored artifact in its text alone (an MCP resource's line) had no
    button: it has one, found with a one-byte read of the id, and opens as the others do; a
    result naming 64 hex digits no artifact has gets none, and no error is shown for it."""
    driver = browser
    with artifacts_session(driver, tmp_path) as (aids, _):
        wait_for(lambda: by_css(driver, CARD.format("named") + " button.artifact"), "the button of an id named in text")
        assert texts(driver, CARD.format("named") + " button.artifact") == [f"Open artifact (text/plain, {len(NAMED)} B)"]
        assert artifact_reads(driver, aids["named"]) == [{"id": aids["named"], "range": "bytes=0-0", "status": 206, "size": 1}]
        wait_for(lambda: artifact_reads(driver, MISSING), "the id no artifact has, asked about")
        assert [r["status"] for r in artifact_reads(driver, MISSING)] == [404]
        assert not by_css(driver, CARD.format("missing") + " button.artifact")
        # (an id a result names with its artifact's own button is not asked about again)
        assert not artifact_reads(driver, aids["pdf"])
        click(driver, CARD.format("named") + " button.artifact")
        wait_for(lambda: driver.execute_script(
            f"return Array.from(document.querySelectorAll(\"{CARD.format('named')} pre.artifact-text\"), (n) => n.textContent)")
            == [NAMED.decode()], "the artifact named in text, shown")
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
        assert not console_errors(driver)
