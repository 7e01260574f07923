"""The dashboard (F-API-6) in a real browser against a real daemon.

A ``lens serve --port 0`` subprocess runs in a temporary working directory (its own config with a
scripted faux provider, its own pair file and event log). Two clients are paired, one with strong
trust and one read-only. Headless Chromium from Debian (``/usr/bin/chromium`` with
``/usr/bin/chromedriver``, driven by selenium) opens the page, and the test uses it as a person
would: paste the credential, create a project and a session, submit inputs, and watch the answers
arrive over SSE; then drop the live connection and check that it resumes without gaps or
duplicates, queue and withdraw an input while a run streams, abort the run, take a screenshot, and
check that a read-only credential sees the session but cannot submit.

Chromium is installed by ``.ci/ensure-chromium`` when it is missing (as root, with apt-get); the
test is skipped only when that is impossible. Every wait is for a condition, with a timeout.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import struct
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from runtime.providers.builtin import BUILTINS

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ENSURE = REPO / ".ci" / "ensure-chromium"
WAIT = 10.0  # seconds for any one condition

# A scripted faux provider: one turn streams its first half and then pauses (so a run is
# observably busy until the test aborts it); anything else gets the built-in echo.
QUESTIONS = {"questions": [
    {"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"}, {"id": "blue", "label": "Blue"}],
     "allow_text": False},
    {"id": "size", "text": "Size?", "options": [{"id": "big", "label": "Big"}, {"id": "small", "label": "Small"}],
     "allow_text": True},
]}
CONFIG = {
    "server": {"heartbeatSeconds": 1},
    "providers": [{
        "id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}],
        "script": [{"when": "stream slowly", "chunks": ["(faux) Streaming the first half… ", "and the rest."],
                    "chunkDelayMs": 60000},
                   {"when": "fail now", "error": {"code": "PROVIDER_ERROR", "message": "scripted failure"}},
                   {"when": "fail midway", "chunks": ["(faux) Half an answer… "],
                    "error": {"code": "OVERLOADED", "message": "scripted overload", "retryable": True}},
                   {"when": "ask two questions", "toolCalls": [{"name": "ask_user", "arguments": QUESTIONS}]},
                   # (input counted apart from its cached part, as Anthropic reports it)
                   {"when": "count a cached input", "text": "(faux) Counted.", "inputTokens": 7,
                    "cacheReadTokens": 900, "totalInputTokens": 907}],
    }],
    "defaultModel": "faux/faux-1",
}


# --------------------------------------------------------------------------- browser availability


def _chromium_or_skip() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    reason = "chromium is not installed"
    if ENSURE.exists():
        proc = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=600)
        if CHROMIUM.exists() and CHROMEDRIVER.exists():
            return
        reason += f" and .ci/ensure-chromium could not install it: {(proc.stderr or proc.stdout).strip()[-300:]}"
    print(f"SKIP: {reason}", file=sys.stderr)
    pytest.skip(reason)


# --------------------------------------------------------------------------- the daemon


class Daemon:
    def __init__(self, cwd: Path, config: dict[str, Any] | None = None) -> None:
        self.cwd = cwd
        (cwd / "config").mkdir()
        (cwd / "config" / "lens.jsonc").write_text(json.dumps(CONFIG if config is None else config))
        self.log: list[str] = []
        self.port = 0
        self.start()

    def start(self, data: str | None = None) -> None:
        """Start ``lens serve`` (again on the same port once it has one; ``data``: another data directory)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "runtime.cli", "serve", "--port", str(self.port)]
        if data is not None:
            cmd += ["--data", data]
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        self.base = self._wait_listening()
        self.port = int(self.base.rsplit(":", 1)[1])

    def restart(self, data: str | None = None) -> None:
        self.stop()
        self.start(data)

    def _pump(self) -> None:
        proc, lines = self.proc, self.lines
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.append(line)
            lines.put(line)

    def _wait_listening(self) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                return m.group(1)
        raise AssertionError("the daemon did not start:\n" + "".join(self.log))

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + "/api/v1" + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read() or b"null")

    def pair(self, client_id: str, strong: bool) -> str:
        status, body = self.request("POST", "/pair/requests", {"clientId": client_id, "name": "dashboard test"})
        assert status == 202, body
        cmd = [sys.executable, "-m", "runtime.cli", "pair", "approve", "--client", client_id]
        if strong:
            cmd.append("--strong-trust")
        out = subprocess.run(cmd, cwd=self.cwd, capture_output=True, text=True, timeout=30, check=True).stdout
        return out.strip().splitlines()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    cwd = tmp_path / "daemon"
    cwd.mkdir()
    d = Daemon(cwd)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = start_chromium(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


def start_chromium(tmp_path: Path, password_manager: bool = False, blink_settings: str = "") -> Any:
    """Headless Chromium under chromedriver; ``password_manager``: as a person's browser, offering
    to save passwords (chromedriver's ``--enable-automation`` turns that off); ``blink_settings``:
    Blink's own settings for the renderer (``--blink-settings``), such as the pointers a device
    has, which no DevTools command emulates apart."""
    _chromium_or_skip()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:  # pragma: no cover - it is in the test extra
        pytest.fail("selenium is not installed: pip install -e '.[test]'")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    if password_manager:
        opts.add_experimental_option("excludeSwitches", ["enable-automation"])
        opts.add_experimental_option("prefs", {"credentials_enable_service": True,
                                               "profile.password_manager_enabled": True})
    # the page's console (for uncaught errors) and the network events (what the page requested)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--no-first-run", "--no-default-browser-check",
                 "--window-size=1400,900", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    if blink_settings:
        opts.add_argument(f"--blink-settings={blink_settings}")
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=opts, service=service)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


# --------------------------------------------------------------------------- helpers


def wait_for(cond: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # a stale element mid-render: try again
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(0.05)


def by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def one(driver: Any, selector: str) -> Any:
    found = by_css(driver, selector)
    assert found, f"no element matches {selector!r}"
    return found[0]


def click(driver: Any, selector: str) -> None:
    """Click what matches; the page re-renders lists as events arrive, so a stale element is found again."""
    def attempt() -> bool:
        one(driver, selector).click()
        return True
    wait_for(attempt, f"a clickable {selector!r}")


def press(driver: Any, selector: str, *keys: str) -> None:
    """Focus what matches, then press keys where the focus is. The page redraws lists as events
    arrive (a redrawn list puts the focus on the new element): the focus is set on a fresh match
    until it holds, and the keys go to the focused element, not to one found before a redraw."""
    from selenium.webdriver.common.action_chains import ActionChains
    wait_for(lambda: driver.execute_script("""const n = document.querySelector(arguments[0]);
        if (n) n.focus(); return n !== null && document.activeElement === n""", selector), f"the focus on {selector!r}")
    ActionChains(driver).send_keys(*keys).perform()


def body_data(driver: Any, key: str) -> str | None:
    return driver.execute_script("return document.body.dataset[arguments[0]] ?? null", key)


def texts(driver: Any, selector: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), n => n.textContent)", selector)


def attrs(driver: Any, selector: str, *names: str) -> list[list[str | None]]:
    """The attributes ``names`` of every match (``textContent`` reads that property), in one read
    of the page. The page redraws lists as events arrive: an element found by one WebDriver call
    and read by the next can be gone in between (a stale element), or be read half from one
    drawing and half from the next."""
    return driver.execute_script("""return Array.from(document.querySelectorAll(arguments[0]),
        (n) => arguments[1].map((a) => a === "textContent" ? n.textContent : n.getAttribute(a)))""", selector, list(names))


def becomes(read: Callable[[], Any], expected: Any, what: str, timeout: float = WAIT) -> None:
    """Waits until ``read()`` is ``expected`` (a callable: until it holds for what is read). For
    reads of elements found by one WebDriver call and read by the next (``.text``,
    ``.is_enabled()``, ...) on a part of the page that can still be drawn again (a run going on, a
    view read on its way): a stale element, or a value read before the redraw that brings the
    expected one, is read again. A mismatch still fails after ``timeout``, with the last value
    read and the expected one in the message."""
    seen: list[Any] = []

    def check() -> bool:
        seen.append(read())
        return bool(expected(seen[-1]) if callable(expected) else seen[-1] == expected)
    try:
        wait_for(check, what, timeout)
    except AssertionError as exc:
        last = repr(seen[-1]) if seen else "none"
        raise AssertionError(f"{exc}; last read: {last}; expected: {expected!r}") from None


def connect(driver: Any, credential: str) -> None:
    field = one(driver, "#cred")
    field.clear()
    field.send_keys(credential)
    click(driver, "#connect")


def submit(driver: Any, text: str, when_busy: str = "followUp") -> None:
    from selenium.webdriver.support.ui import Select
    box = one(driver, "#input")
    box.clear()
    box.send_keys(text)
    Select(one(driver, "#when-busy")).select_by_value(when_busy)
    click(driver, "#send")


def committed_answers(driver: Any) -> list[str]:
    return texts(driver, "#timeline .msg.assistant:not(.streaming) .text")


def answered(driver: Any, text: str, what: str) -> None:
    """Send ``text`` and wait for the faux provider's answer to it ("(faux) You said: …")."""
    submit(driver, text)
    wait_for(lambda: f"(faux) You said: {text}" in committed_answers(driver), what)


def check_png(path: Path) -> tuple[int, int, int]:
    """Decode a PNG (8-bit RGB/RGBA, non-interlaced, as Chromium writes) with zlib; (width, height, colours)."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, {}
    idat = b""
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos:pos + 4])
        kind = raw[pos + 4:pos + 8]
        data = raw[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", raw[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + data) == crc, f"bad CRC in {kind!r}"
        if kind == b"IDAT":
            idat += data
        else:
            chunks[kind] = data
        pos += 12 + length
    assert b"IEND" in chunks
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    pixels = zlib.decompress(idat)
    assert len(pixels) == height * (stride + 1)
    prev = bytearray(stride)
    colours: dict[bytes, int] = {}
    for y in range(height):
        ftype = pixels[y * (stride + 1)]
        line = bytearray(pixels[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            else:
                assert ftype == 0, f"bad filter {ftype}"
        if y % 4 == 0:  # every 4th row is plenty to count colours
            for x in range(0, stride, bpp * 2):
                px = bytes(line[x:x + 3])
                colours[px] = colours.get(px, 0) + 1
        prev = line
    total = sum(colours.values())
    assert max(colours.values()) < 0.9 * total, "the screenshot is (almost) one colour"
    return width, height, len(colours)


# --------------------------------------------------------------------------- the test


def test_dashboard_live_session(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    driver = browser
    strong = daemon.pair("dash-strong", strong=True)
    readonly = daemon.pair("dash-read", strong=False)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    # GET /whoami tells the page what the credential may do (and needs one).
    assert daemon.request("GET", "/whoami", token=readonly) == (
        200, {"clientId": "dash-read", "trust": "read", "heartbeatSeconds": 1})
    assert daemon.request("GET", "/whoami", token=strong) == (
        200, {"clientId": "dash-strong", "trust": "strong", "heartbeatSeconds": 1})
    assert daemon.request("GET", "/whoami")[0] == 401

    driver.get(daemon.base + "/")
    assert driver.title == "Lens dashboard"

    # A wrong credential is refused, with the daemon's error code shown.
    connect(driver, "lens_not_a_real_credential")
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the AUTH_INVALID error")

    # Strong trust: create a project and a session through the page.
    connect(driver, strong)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    assert one(driver, "#cred").get_attribute("value") == ""
    one(driver, "#project-name").send_keys("Browser project")
    one(driver, "#project-workspace").send_keys(str(workspace))
    click(driver, "#new-project button")
    wait_for(lambda: "Browser project" in " ".join(texts(driver, "#projects button.selected")), "the new project")
    click(driver, "#new-session button")
    wait_for(lambda: one(driver, "#composer").is_displayed(), "the composer of the new session")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    session_id = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId"), "the selected session")
    assert session_id and session_id.startswith("ses_")

    # Submit; the faux answer arrives live (streamed deltas, then the committed message).
    submit(driver, "hello from the browser")
    expected = "(faux) You said: hello from the browser"
    wait_for(lambda: expected in committed_answers(driver), "the faux answer")
    assert int(body_data(driver, "deltas") or 0) >= 1, "no model.delta frame was shown"
    assert int(body_data(driver, "lastEventId") or 0) > 0, "no committed event came over SSE"
    assert "hello from the browser" in texts(driver, "#timeline .msg.user .text")

    # A tool call is shown with its status and result.
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: by_css(driver, "#timeline .tool[data-status='ok']"), "the finished tool call")
    assert "get_system_time" in texts(driver, "#timeline .tool .name")
    wait_for(lambda: any(a.startswith("The tool answered:") for a in committed_answers(driver)), "the answer to the tool result")

    # The connection drops; the page resumes from the last seen id: nothing missed, nothing twice.
    before = int(body_data(driver, "reconnects") or 0)
    driver.execute_script("window.lensDashboard.dropStream()")
    wait_for(lambda: int(body_data(driver, "reconnects") or 0) > before, "a reconnect")
    wait_for(lambda: body_data(driver, "conn") == "live", "the resumed connection")
    answered(driver, "after the reconnect", "the answer after the reconnect")
    assert int(body_data(driver, "duplicates") or 0) == 0
    users = texts(driver, "#timeline .msg.user .text")
    assert users == ["hello from the browser", "/tool get_system_time {}", "after the reconnect"], users
    status, events = daemon.request("GET", f"/sessions/{session_id}/events?limit=1000", token=strong)
    assert status == 200
    assert int(body_data(driver, "lastEventId")) == events["events"][-1]["seq"]

    # A run that streams and then waits: its partial answer shows; an input sent meanwhile is queued.
    submit(driver, "stream slowly please")
    wait_for(lambda: any("(faux) Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running", "the running status")
    # A page opened mid-answer, and one whose stream dropped, show what streamed before they
    # joined (deltas are not in the log: the daemon sends the partial answer), with no gap note.
    first_half = ["(faux) Streaming the first half… "]
    driver.refresh()
    connect(driver, strong)
    click(driver, "#projects button")
    click(driver, f"#sessions button[data-session-id='{session_id}']")
    wait_for(lambda: texts(driver, "#timeline .msg.streaming .text") == first_half, "the partial answer after a reload")
    assert int(body_data(driver, "partials")) == 1 and body_data(driver, "deltas") is None
    before = int(body_data(driver, "reconnects") or 0)
    driver.execute_script("window.lensDashboard.dropStream()")
    wait_for(lambda: int(body_data(driver, "reconnects") or 0) > before and int(body_data(driver, "partials")) == 2,
             "the partial answer after a dropped stream")
    next_frame(driver)
    assert texts(driver, "#timeline .msg.streaming .text") == first_half
    assert not by_css(driver, "#timeline .msg.streaming .gap")
    submit(driver, "a follow-up while busy")
    wait_for(lambda: "a follow-up while busy" in " ".join(texts(driver, "#queue li.card .text")), "the queued input")
    shot = tmp_path / "dashboard.png"
    assert driver.save_screenshot(str(shot))
    if os.environ.get("LENS_DASHBOARD_SCREENSHOT"):  # keep a copy to look at
        shutil.copyfile(shot, os.environ["LENS_DASHBOARD_SCREENSHOT"])
    click(driver, "#queue li.card button.secondary")  # withdraw
    wait_for(lambda: not by_css(driver, "#queue li.card"), "the withdrawn input to leave the queue")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run to end")
    wait_for(lambda: not by_css(driver, "#timeline .msg.streaming"), "the streaming bubble to go")
    # What streamed of the aborted answer stays, as the assistant's message.
    wait_for(lambda: committed_answers(driver)[-1:] == first_half, "the aborted answer's text kept")
    # ... and says that it was cut by the abort (the view's status "aborted").
    assert texts(driver, "#timeline .msg.assistant.aborted .who") == ["assistant · aborted"]
    # The Working Context panel counts the kept text at once (not at the next input).
    status, ctx = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert status == 200 and ctx["items"][-1]["role"] == "assistant" and ctx["workingItemIds"][-1] == ctx["items"][-1]["id"], ctx
    counted = f"{len(ctx['workingItemIds'])} in context of {len(ctx['items'])}"
    wait_for(lambda: texts(driver, "#context dd[data-key='items']") == [counted], "the panel counting the kept text")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    width, height, colours = check_png(shot)
    assert width >= 800 and height >= 500, (width, height)
    assert colours >= 16, colours

    # The credential was kept in page memory only.
    assert driver.execute_script("return localStorage.length + sessionStorage.length") == 0
    assert driver.execute_script("return document.cookie") == ""
    assert strong not in driver.current_url and readonly not in driver.current_url
    assert strong not in driver.page_source

    # A read-only credential sees the session but has no way to submit, and the daemon refuses it.
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    connect(driver, readonly)
    wait_for(lambda: body_data(driver, "trust") == "read", "read-only trust")
    wait_for(lambda: by_css(driver, "#projects button"), "the project list")
    wait_for(lambda: by_css(driver, f"#sessions button[data-session-id='{session_id}']"), "the session list")
    click(driver, f"#sessions button[data-session-id='{session_id}']")
    wait_for(lambda: expected in committed_answers(driver), "the session's items, read-only")
    wait_for(lambda: body_data(driver, "conn") == "live", "the read-only live connection")
    for sel in ("#composer", "#new-project", "#new-session", "#abort"):
        assert not one(driver, sel).is_displayed(), f"{sel} is shown to a read-only credential"
    assert one(driver, "#trust").text == "read-only"
    refused = driver.execute_async_script("""
        const [sid, token, done] = arguments;
        fetch('/api/v1/sessions/' + sid + '/inputs', {method: 'POST',
          headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token},
          body: JSON.stringify({requestId: 'ro-1', content: 'nope'})})
          .then(async r => done([r.status, await r.json()]), e => done(['error', String(e)]));
    """, session_id, readonly)
    assert refused[0] == 403 and refused[1]["error"]["code"] == "FORBIDDEN", refused
    assert "a follow-up while busy" not in texts(driver, "#timeline .msg.user .text"), "the withdrawn input ran"

    assert time.monotonic() - started < 30, "the dashboard test must stay bounded"


def open_new_session(driver: Any, daemon: Daemon, token: str, workspace: Path) -> str:
    driver.get(daemon.base + "/")
    connect(driver, token)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    one(driver, "#project-name").send_keys("Questions project")
    one(driver, "#project-workspace").send_keys(str(workspace))
    click(driver, "#new-project button")
    wait_for(lambda: by_css(driver, "#projects button.selected"), "the new project")
    click(driver, "#new-session button")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    return wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId"), "the session")


def open_session(driver: Any, daemon: Daemon, tmp_path: Path, client: str) -> tuple[str, str]:
    """A strong credential for ``client``, a new workspace (``tmp_path / "workspace"``), and a new
    session of its project opened in the page: (the credential, the session's id)."""
    token = daemon.pair(client, strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return token, open_new_session(driver, daemon, token, workspace)


def open_in_page(driver: Any, daemon: Daemon, token: str, session_id: str) -> None:
    """Load the page, connect with ``token``, and open the session ``session_id`` of the first
    project listed."""
    driver.get(daemon.base + "/")
    connect(driver, token)
    click(driver, "#projects button")
    click(driver, f"#sessions button[data-session-id='{session_id}']")


def seen_then_stopped(driver: Any, daemon: Daemon, token: str, tmp_path: Path) -> tuple[str, str, int]:
    """A new session opened in the page, the page up to date with it, then the daemon stopped:
    (session id, project id, the last seq the page saw)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sid = open_new_session(driver, daemon, token, workspace)
    project = driver.execute_script("return document.querySelector('#projects button.selected').dataset.projectId")
    seen = daemon.request("GET", f"/sessions/{sid}", token=token)[1]["lastSeq"]
    wait_for(lambda: int(body_data(driver, "lastEventId") or seen) == seen, "the page up to date")
    daemon.stop()
    return sid, project, seen


def renamed_while_stopped(daemon: Daemon, project: str, sid: str, times: int = 1) -> int:
    """The session renamed ``times`` times through the log while its daemon is stopped; the
    last event's seq."""
    import trio

    from events.store import Draft, open_store
    from events.types import SessionNamed

    async def write() -> int:
        async with open_store(daemon.cwd / ".lens") as store:
            res = await store.append(*(Draft(SessionNamed(name=f"name {i}"), project_id=project, session_id=sid)
                                       for i in range(times)))
            return res.seq

    return trio.run(write)


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE" and "Uncaught" in e["message"]]


# The answer to the page's next send of an input is lost after the daemon has it (a network
# failure on the way back).
LOSE_NEXT_SEND_ANSWER = """
    const real = window.fetch; let once = true;
    window.fetch = async (...args) => {
      const r = await real(...args);
      if (once && String(args[0]).endsWith('/inputs')) { once = false; throw new TypeError('Failed to fetch'); }
      return r;
    };"""


def test_dashboard_questions_failures_retries_and_silence(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-q")

    # Two questions: options toggle (one click used to answer the whole call with "Red"), the
    # typed text survives the re-render another input causes, and "Answer" sends it all.
    submit(driver, "ask two questions")
    wait_for(lambda: texts(driver, "#timeline .question > .text") == ["Colour?", "Size?"], "both questions")
    click(driver, "#timeline .question button[data-option-id='red']")
    # (the page is still drawn again as the run's events and view reads arrive: each read is one
    # read of the page, the text typed where the focus is, set on a fresh match)
    assert attrs(driver, "#timeline .question button[data-option-id='red']", "aria-pressed") == [["true"]]
    press(driver, "#timeline .question input", "medium-ish")
    assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": "other", "content": "a queued one"},
                          token=strong)[0] == 202
    wait_for(lambda: "a queued one" in " ".join(texts(driver, "#queue li.card .text")), "the queued input")
    assert body_data(driver, "sessionStatus") == "awaiting_answer"
    assert driver.execute_script("return Array.from(document.querySelectorAll('#timeline .question input'), n => n.value)") \
        == ["medium-ish"]
    assert driver.execute_script("return document.activeElement && document.activeElement.getAttribute('aria-label')") == "answer"
    assert attrs(driver, "#timeline .question button[data-option-id='red']", "aria-pressed") == [["true"]]
    click(driver, "#timeline .question button[data-option-id='big']")
    click(driver, "#timeline .question .actions button.small:not(.secondary)")
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the answered question")
    events = daemon.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    answered = [e["body"] for e in events if e["kind"] == "question.answered"]
    assert answered and answered[0]["answer"] == {"kind": "answer", "optionIds": ["red", "big"], "text": "medium-ish"}, answered

    # A send whose answer was lost (the daemon had it) is retried with the same requestId: one input.
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    driver.execute_script(LOSE_NEXT_SEND_ANSWER)
    submit(driver, "send me once")
    wait_for(lambda: by_css(driver, "#errors li"), "the failed send")
    click(driver, "#send")  # the text is still in the box
    wait_for(lambda: "duplicate" in one(driver, "#composer-note").text, "the retry answered as a duplicate")
    wait_for(lambda: "(faux) You said: send me once" in committed_answers(driver), "the one answer")
    assert texts(driver, "#timeline .msg.user .text").count("send me once") == 1

    # A failed model request is still shown after a reload (it was only a live notice).
    submit(driver, "fail now please")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed"), "the failure in the timeline")
    driver.refresh()
    connect(driver, strong)
    click(driver, "#projects button")
    click(driver, f"#sessions button[data-session-id='{sid}']")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed[data-code='PROVIDER_ERROR']"), "the failure after a reload")
    assert "scripted failure" in texts(driver, "#timeline .msg.failed .text")[0]
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")

    # An answer whose request failed while it streamed keeps what had streamed, as the
    # assistant's message saying that it failed (the view's status "failed"), and the failure's
    # own notice follows it.
    submit(driver, "fail midway please")
    wait_for(lambda: by_css(driver, "#timeline .msg.failed[data-code='OVERLOADED']"), "the failure midway")
    wait_for(lambda: committed_answers(driver)[-1:] == ["(faux) Half an answer… "], "the failed answer's text kept")
    assert texts(driver, "#timeline .msg.assistant.failed-answer .who") == ["assistant · failed"]
    assert not by_css(driver, "#timeline .msg.assistant.failed")  # (not styled as the failure's notice)
    [[title]] = attrs(driver, "#timeline .msg.assistant.failed-answer .who", "title")
    assert title and title.startswith("the model request failed while this answer streamed"), title

    # A stream gone silent (the daemon stopped, the socket open) is given up and resumed; a
    # dropped stream leaves no uncaught error in the console.
    before = int(body_data(driver, "reconnects") or 0)
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: body_data(driver, "conn") != "live", "the silent stream to be given up")
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: body_data(driver, "conn") == "live" and int(body_data(driver, "reconnects") or 0) > before,
             "the resumed stream")
    driver.execute_script("window.lensDashboard.dropStream()")
    wait_for(lambda: int(body_data(driver, "reconnects") or 0) > before + 1, "a second reconnect")
    wait_for(lambda: body_data(driver, "conn") == "live", "live again")
    assert console_errors(driver) == []

    # A broken pair file ends the stream as the daemon's fault (no credential can be checked): the
    # page keeps retrying, and is live again once the file is fixed. (The stream used to end with
    # "credential revoked"; the page then stopped for good and asked for a new credential.)
    pair_file = daemon.cwd / "config" / "pair.json"
    good, edit = pair_file.read_bytes(), pair_file.with_name("pair.json.edit")
    before = int(body_data(driver, "reconnects") or 0)
    edit.write_bytes(b"{ not json")
    os.replace(edit, pair_file)
    try:
        wait_for(lambda: int(body_data(driver, "reconnects") or 0) > before + 1, "retries while the pair file is invalid")
        assert body_data(driver, "conn") != "offline"
        assert not by_css(driver, "#errors li[data-code='AUTH_INVALID']")
    finally:
        edit.write_bytes(good)
        os.replace(edit, pair_file)
    wait_for(lambda: body_data(driver, "conn") == "live", "live again once the pair file is fixed")

    # The page's own script runs by its hash; no inline script may (an injection would not run).
    csp = urllib.request.urlopen(daemon.base + "/", timeout=WAIT).headers["Content-Security-Policy"]
    assert "'sha256-" in csp and "'unsafe-inline'" not in csp.split("script-src", 1)[1].split(";")[0]
    assert time.monotonic() - started < 45, "the dashboard test must stay bounded"



# --------------------------------------------------------------------------- an audit as a user would use it


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Daemon]]:
    made: list[Daemon] = []

    def make(config: dict[str, Any]) -> Daemon:
        cwd = tmp_path / f"daemon{len(made)}"
        cwd.mkdir()
        made.append(Daemon(cwd, config))
        return made[-1]

    try:
        yield make
    finally:
        for d in made:
            d.stop()


def with_turns(*turns: dict[str, Any], **server: Any) -> dict[str, Any]:
    """CONFIG with these faux turns first (they win over its own) and these server settings."""
    config = json.loads(json.dumps(CONFIG))
    config["providers"][0]["script"][:0] = list(turns)
    config["server"].update(server)
    return config


def jobs_turn(*commands: str) -> dict[str, Any]:
    """A faux turn (for ``with_turns``) whose model, asked "start a job", starts a job per command."""
    return {"when": "start a job", "toolCalls": [
        {"name": "job", "arguments": {"action": "start", "command": c}} for c in commands]}


def job_ids(driver: Any) -> list[str]:
    """The ids of the jobs the page's panel lists, in its order."""
    return driver.execute_script("return Array.from(document.querySelectorAll('#jobs li.card'), c => c.dataset.jobId)")


def session_starting_jobs(make_daemon: Callable[[dict[str, Any]], Daemon], driver: Any, tmp_path: Path, client: str,
                          *commands: str, turns: tuple[dict[str, Any], ...] = ()) -> tuple[Daemon, str, str, list[str]]:
    """A daemon whose faux model starts a job per command when asked "start a job" (``turns``: its
    other turns), a session opened in the page and asked it, and the page listing the jobs: (the
    daemon, a strong token, the session's id, the jobs' ids)."""
    d = make_daemon(with_turns(jobs_turn(*commands), *turns))
    strong, sid = open_session(driver, d, tmp_path, client)
    submit(driver, "start a job")
    wait_for(lambda: len(job_ids(driver)) == len(commands), "the jobs' cards", 2 * WAIT)
    return d, strong, sid, job_ids(driver)


def network_requests(driver: Any, base: str) -> list[tuple[str, str, bool]]:
    """(method, path, sent a credential) of each request the page made to the daemon since the last call."""
    out = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent" and msg["params"]["request"]["url"].startswith(base):
            req = msg["params"]["request"]
            out.append((req["method"], req["url"][len(base):], "Authorization" in req["headers"]))
    return out


def count_requests(counter: str, matches: str) -> str:
    """A script after which the page's requests whose URL (``url``, a string) and options
    (``init``, or undefined) ``matches`` (a JavaScript condition) are counted in
    ``window[counter]``."""
    return f"""
    window.{counter} = 0;
    const real = window.fetch;
    window.fetch = (...args) => {{
      const url = String(args[0]), init = args[1];
      if ({matches}) window.{counter}++;
      return real(...args);
    }};"""


def hold_requests(counter: str, release: str, matches: str) -> str:
    """A script after which the page's requests whose URL (``url``, a string) ``matches`` (a
    JavaScript condition) are counted in ``window[counter]`` and wait until ``window[release]()``
    is called."""
    return f"""
    window.{counter} = 0;
    const real = window.fetch;
    let release; const gate = new Promise((r) => {{ release = r; }});
    window.{release} = () => release();
    window.fetch = async (...args) => {{
      const url = String(args[0]);
      if ({matches}) {{ window.{counter}++; await gate; }}
      return real(...args);
    }};"""


COUNT_STREAMS = count_requests("streamRequests", "url.includes('/events/stream')")


def next_frame(driver: Any) -> None:
    """Return once the page has painted two more animation frames."""
    driver.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done()));")


def stream_requests(driver: Any) -> int:
    return driver.execute_script("return window.streamRequests")


def test_dashboard_daemon_restart_resumes_without_doubling_and_a_refused_stream_is_not_retried(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    driver = browser
    # The model waits before its first delta: the answer restarted with the daemon streams its
    # first half again once the page is back.
    d = make_daemon(with_turns({"when": "delayed stream", "delayMs": 3000, "chunks": ["Part one. ", "Part two."],
                                "chunkDelayMs": 60000}))
    strong, sid = open_session(driver, d, tmp_path, "dash-restart")
    answered(driver, "hello before the restart", "the first answer")
    submit(driver, "delayed stream please")
    wait_for(lambda: texts(driver, "#timeline .msg.streaming .text") == ["Part one. "], "the first half", WAIT + 3)
    deltas, partials = int(body_data(driver, "deltas")), int(body_data(driver, "partials") or 0)

    # The daemon restarts mid-answer; the run asks the model again (attempt 2) and streams anew.
    # The page comes back before or after that attempt's first delta (its reconnect backs off
    # while the daemon is away): a delta, or the partial answer a joining stream gets, shows it.
    d.restart()
    wait_for(lambda: body_data(driver, "conn") == "live" and int(body_data(driver, "reconnects") or 0) >= 1,
             "the stream resumed", 20)

    def second_attempt_shown() -> bool:
        new = int(body_data(driver, "deltas")) > deltas or int(body_data(driver, "partials") or 0) > partials
        next_frame(driver)  # (the bubbles are repainted once per animation frame)
        return new and texts(driver, "#timeline .msg.streaming .text") == ["Part one. "]

    # The earlier attempt's text is not kept in front of the new one ("Part one. Part one. ").
    wait_for(second_attempt_shown, "the second attempt's first half, once", WAIT + 3)
    assert not by_css(driver, "#timeline .msg.streaming .gap")
    assert texts(driver, "#timeline .msg.user .text") == ["hello before the restart", "delayed stream please"]
    assert body_data(driver, "duplicates") is None
    # A refresh that failed while the daemon was away is not left on screen once it is back.
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    wait_for(lambda: not by_css(driver, "#timeline .msg.streaming"), "the streaming bubble to go")
    status, events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)
    wait_for(lambda: int(body_data(driver, "lastEventId")) == d.request(
        "GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"][-1]["seq"], "every event seen")

    # The daemon comes back on an empty log (another data directory; the pair file is the same):
    # the page's Last-Event-ID is past its end, which the daemon refuses. The page says so and
    # stops; it does not ask again and again.
    driver.execute_script(COUNT_STREAMS)
    d.restart(data=str(d.cwd / "other-data"))
    wait_for(lambda: body_data(driver, "conn") == "offline", "the stream to stop", 20)
    wait_for(lambda: by_css(driver, "#errors li[data-code='INVALID_ARGUMENT']"), "the daemon's refusal shown")
    asked = stream_requests(driver)
    assert asked >= 1
    deadline = time.monotonic() + 2.0  # an observation window: a retry loop (0.5 s, 1 s, …) would show
    while time.monotonic() < deadline:
        assert stream_requests(driver) == asked, "the page retried a stream the daemon refused"
        time.sleep(0.1)
    assert console_errors(driver) == []
    assert time.monotonic() - started < 60, "the test must stay bounded"


XSS = '<img src=x onerror="window.injected=(window.injected||0)+1"><script>window.injected=99</script>'
BIDI = "שלום עולם! مرحبا 123 — 👩‍👩‍👧‍👦🏳️‍🌈 é"


def test_dashboard_shows_hostile_text_as_text_sends_no_request_without_the_credential_and_forgets_a_revoked_one(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    driver = browser
    d = make_daemon(with_turns(
        {"when": "hostile tools", "toolCalls": [
            {"name": XSS, "arguments": {"a": XSS}},
            {"name": "read_file", "arguments": {"path": XSS + ".txt"}},
            {"name": "todo", "arguments": {"items": [{"id": "1", "text": XSS, "status": "pending"},
                                                     {"id": "2", "text": BIDI, "status": "in_progress"}]}}]},
        {"when": "hostile answer", "text": XSS + "\n" + BIDI + "\n" + "y" * 5000, "reasoning": XSS}))
    strong = d.pair("dash-hostile", strong=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    driver.get(d.base + "/")
    network_requests(driver, d.base)

    # Empty states: no projects, then no sessions, then no messages.
    connect(driver, strong)
    wait_for(lambda: texts(driver, "#projects li") == ["No projects yet."], "the empty project list")
    one(driver, "#project-name").send_keys(XSS + " " + BIDI)
    one(driver, "#project-workspace").send_keys(str(workspace))
    click(driver, "#new-project button")
    wait_for(lambda: texts(driver, "#sessions li") == ["No sessions yet."], "the empty session list")
    assert (XSS + " " + BIDI) in " ".join(texts(driver, "#projects button"))
    click(driver, "#new-session button")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live connection")
    assert texts(driver, "#timeline > *") == ["No messages yet."]

    # Markup in inputs, tool names, arguments, file names, results, todos and answers is text.
    submit(driver, "hostile tools " + XSS)
    wait_for(lambda: len(by_css(driver, "#timeline .tool")) == 3 and body_data(driver, "sessionStatus") == "idle",
             "the three tool calls")
    submit(driver, "hostile answer")
    wait_for(lambda: any(a.startswith(XSS) for a in committed_answers(driver)), "the hostile answer")
    assert driver.execute_script("return window.injected ?? null") is None
    assert not by_css(driver, "#timeline img, #timeline script, nav img, aside img")
    assert texts(driver, "#timeline .tool .name")[0] == XSS
    assert XSS + ".txt" in " ".join(texts(driver, "#timeline .tool pre"))
    assert "hostile tools " + XSS in texts(driver, "#timeline .msg.user .text")
    assert [t for t in texts(driver, "#todos li .t")] == [XSS, BIDI]
    # So is a session's name (the page's title for it, the list after a reload, the activity line).
    sid = driver.execute_script("return document.querySelector('#sessions button.selected').dataset.sessionId")
    assert d.request("PATCH", f"/sessions/{sid}", {"name": XSS}, token=strong)[0] == 200
    wait_for(lambda: one(driver, "#session-title").text == XSS, "the hostile session name")
    click(driver, "#refresh")
    wait_for(lambda: XSS in " ".join(texts(driver, "#sessions button")), "the hostile name in the list")
    assert driver.execute_script("return window.injected ?? null") is None
    assert not by_css(driver, "#timeline img, #timeline script, nav img, aside img, header img, #session-head img")
    # Right-to-left text is laid out by its own direction; a very long line does not widen the page.
    assert driver.execute_script("""return Array.from(document.querySelectorAll('#timeline .msg .text, #todos .t'))
                                    .every(n => n.dir === 'auto')""")
    assert driver.execute_script("""const d = document.documentElement, t = document.querySelector('#timeline');
                                    return d.scrollWidth <= d.clientWidth && t.scrollWidth <= t.clientWidth""")

    # Every request the page made to the daemon carried the credential, except the page itself.
    made = network_requests(driver, d.base)
    assert made and all(auth for _, path, auth in made if path not in ("/", "/api/v1/health")), made

    # The credential is revoked while the page watches: the page says so, forgets it (the form
    # to paste one is back, nothing that needs it is offered) and asks nothing more.
    driver.execute_script(COUNT_STREAMS)
    subprocess.run([sys.executable, "-m", "runtime.cli", "pair", "revoke", "--client", "dash-hostile"],
                   cwd=d.cwd, capture_output=True, text=True, timeout=30, check=True)
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the revocation shown")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential form")
    assert not one(driver, "#composer").is_displayed()
    assert body_data(driver, "conn") == "offline"
    # (what the page asked before it saw the revocation, e.g. a context panel reload due after
    # the last events, is not the question; from here on nothing is asked)
    network_requests(driver, d.base)
    deadline = time.monotonic() + 1.5  # an observation window: nothing more is asked
    while time.monotonic() < deadline:
        assert not network_requests(driver, d.base)
        time.sleep(0.1)
    assert stream_requests(driver) == 0

    # A credential that cannot be sent in a header (pasted with a line break or a stray
    # character) gets a clear message, not the browser's "failed to fetch".
    connect(driver, "lens_abc\u00e9\u2028def")
    wait_for(lambda: by_css(driver, "#errors li[data-code='AUTH_INVALID']"), "the refused credential")
    assert not by_css(driver, "#errors li[data-code='NETWORK']"), texts(driver, "#errors li")
    assert console_errors(driver) == []
    assert time.monotonic() - started < 45, "the test must stay bounded"


MANY = 260  # tool calls in one answer: more than the page shows at once
WINDOW = 200  # the items the timeline shows of the latest ones
# Records how many items each view the page reads holds (GET /sessions/{id}, whatever its query).
RECORD_VIEWS = """window.viewsRead = [];
    const fetch0 = window.fetch;
    window.fetch = async (url, init) => {
      const resp = await fetch0(url, init);
      if (/\\/api\\/v1\\/sessions\\/[^/?]+(\\?|$)/.test(String(url)) && init && init.method === "GET")
        resp.clone().json().then((v) => window.viewsRead.push(v.items.length), () => {});
      return resp;
    };"""


def test_dashboard_long_session_keeps_the_page_bounded_and_what_the_reader_opened(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys
    started = time.monotonic()
    driver = browser
    d = make_daemon(with_turns({"when": "many tools", "toolCalls": [{"name": "get_system_time", "arguments": {}}] * MANY}))
    strong, sid = open_session(driver, d, tmp_path, "dash-many")
    submit(driver, "many tools")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and any(
        a.startswith("The tool answered") for a in committed_answers(driver)), "the answer after the tool calls", 30)
    view = d.request("GET", f"/sessions/{sid}", token=strong)[1]
    assert len(view["items"]) == MANY + 2

    # The timeline holds the latest items only (the DOM does not grow with the session), and
    # offers the earlier ones.
    shown = len(by_css(driver, "#timeline > .tool, #timeline > .msg"))
    assert 50 <= shown < MANY, shown
    assert texts(driver, "#timeline > .msg.assistant .text")[-1].startswith("The tool answered")
    [more] = texts(driver, "#timeline button.more")
    assert str(MANY + 2 - shown) in more, more

    # What the reader opened stays open, and the same nodes stay, while events arrive; each view
    # the page reads meanwhile holds the items it shows, not the whole session.
    driver.execute_script(RECORD_VIEWS)
    driver.execute_script("""
        const tools = document.querySelectorAll('#timeline .tool');
        const t = tools[tools.length - 3]; t.querySelector('details').open = true; window.openedTool = t;""")
    box = one(driver, "#input")
    box.send_keys("twice, quickly")
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    box.send_keys(Keys.CONTROL, Keys.ENTER)  # a second send of the same text while the first is on its way
    wait_for(lambda: "(faux) You said: twice, quickly" in committed_answers(driver), "the answer")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    assert driver.execute_script("""const t = window.openedTool;
        return t.isConnected && t.querySelector('details').open""")
    assert texts(driver, "#timeline .msg.user .text").count("twice, quickly") == 1
    assert len(by_css(driver, "#timeline > .tool, #timeline > .msg")) <= shown + 2
    read = driver.execute_script("return window.viewsRead")
    assert read and all(n <= WINDOW for n in read), read

    # The earlier items, on demand; the scroll position stays on what the reader was reading.
    click(driver, "#timeline button.more")
    wait_for(lambda: len(by_css(driver, "#timeline .tool")) == MANY, "every tool call")
    assert not by_css(driver, "#timeline button.more")
    assert texts(driver, "#timeline .msg.user .text")[0] == "many tools"

    # A quick double click on Withdraw withdraws once (no "not queued" error for the second).
    submit(driver, "stream slowly please")
    wait_for(lambda: body_data(driver, "sessionStatus") == "running" and by_css(driver, "#timeline .msg.streaming"),
             "the streaming run")
    submit(driver, "queued, then withdrawn")
    wait_for(lambda: by_css(driver, "#queue li.card button.secondary"), "the queued input")
    driver.execute_script("const b = document.querySelector('#queue li.card button.secondary'); b.click(); b.click();")
    wait_for(lambda: not by_css(driver, "#queue li.card"), "the withdrawn input")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the aborted run")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []
    assert time.monotonic() - started < 60, "the test must stay bounded"


def test_dashboard_resumes_a_dropped_stream_without_gaps(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A page that does not read for a while (its main thread busy) while big events are committed
    falls a buffer behind: the daemon ends its stream with ``stream.dropped``; the page resumes
    at once from the last id it was sent, and shows every event once."""
    started = time.monotonic()
    driver = browser
    big = 16  # answers of 900 kB: more than the socket buffers between the daemon and the page hold
    config = with_turns({"when": "big answer", "text": "B" * 900_000}, sseBufferEvents=1, heartbeatSeconds=5)
    config["context"] = {"compaction": {"auto": False}}  # (14 MB of answers would pass the faux window's 80 %)
    d = make_daemon(config)
    strong, sid = open_session(driver, d, tmp_path, "dash-dropped")
    # The page's main thread submits the inputs and then stays busy (not reading its stream) until
    # the daemon has answered them all, however long that takes on a loaded machine: a fixed
    # busy time let a slow daemon's answers arrive after the page read again, and nothing dropped.
    driver.execute_script("""
        const [token, sid, big] = arguments;
        setTimeout(() => {
          const call = (method, path, body) => {
            const x = new XMLHttpRequest();
            x.open(method, '/api/v1' + path, false);  // synchronous: the thread stays here
            x.setRequestHeader('Authorization', 'Bearer ' + token);
            x.send(body === undefined ? null : JSON.stringify(body));
            return JSON.parse(x.responseText);
          };
          let lastSubmit = 0;
          for (let i = 0; i < big; i++) {
            lastSubmit = call('POST', `/sessions/${sid}/inputs`, {requestId: `big-${i}`, content: `big answer ${i}`}).seq;
          }
          const t = Date.now();
          while (Date.now() - t < 45000) {
            const row = call('GET', '/sessions').sessions.find(r => r.id === sid);
            if (row && row.status === 'idle' && row.lastSeq > lastSubmit) break;
            const p = Date.now(); while (Date.now() - p < 100) {}
          }
        }, 0)""", strong, sid, big)
    last = wait_for(lambda: (lambda v: v["status"] == "idle" and len(v["items"]) >= 2 * big and v["lastSeq"])(
        d.request("GET", f"/sessions/{sid}", token=strong)[1]), "the runs to end", 50)
    wait_for(lambda: int(body_data(driver, "dropped") or 0) >= 1, "the stream.dropped frame", 40)
    wait_for(lambda: int(body_data(driver, "lastEventId") or 0) == last and body_data(driver, "conn") == "live",
             "every event, live again", 20)
    assert body_data(driver, "duplicates") is None
    wait_for(lambda: sum(a.startswith("BBBB") for a in committed_answers(driver)) == big, "every answer shown once")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert time.monotonic() - started < 60, "the test must stay bounded"


def test_dashboard_jobs_scan_reads_on_past_a_page_cut_short_by_its_byte_limit(browser: Any, tmp_path: Path) -> None:
    """The page lists a session's jobs from its whole log, also past a few large events. (It
    read the log's pages itself then, and stopped at the first page shorter than 1000 events,
    so the jobs after a page cut short at its byte limit were never shown; it now shows the
    session view's jobs.)"""
    import trio

    from events.store import Draft, open_store
    from events.types import JobFinished, JobStarted, ProjectCreated, SessionCreated

    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    tail = "x" * (6 * 1024 * 1024)  # three of these pass a page's 16 MiB: the first page holds 3 events

    async def write_log() -> None:
        async with open_store(cwd / ".lens") as store:
            await store.append(Draft(ProjectCreated(name="Jobs project", workspace=str(workspace)), project_id="prj_jobs"))
            await store.append(Draft(SessionCreated(model="faux/faux-1"), project_id="prj_jobs", session_id="ses_jobs"))
            for i in range(3):
                await store.append(Draft(JobFinished(job_id=f"early-{i}", output_tail=tail), project_id="prj_jobs",
                                         session_id="ses_jobs"))
            await store.append(Draft(JobStarted(job_id="late", command="make late"), project_id="prj_jobs",
                                     session_id="ses_jobs"))

    trio.run(write_log)
    daemon = Daemon(cwd)
    try:
        token = daemon.pair("dash-jobs", strong=False)
        driver = browser
        open_in_page(driver, daemon, token, "ses_jobs")
        wait_for(lambda: "make late" in texts(driver, "#jobs li.card .sub"), "the job after the short page")
        assert sorted(texts(driver, "#jobs li.card .sub")) == ["early-0", "early-1", "early-2", "make late"]
    finally:
        daemon.stop()


def test_dashboard_lists_the_files_a_session_changed(browser: Any, tmp_path: Path) -> None:
    """The session pane lists the files its edit calls changed (GET /sessions/{id}/changes, F-HAR-3),
    a subagent's and a reverted one's included, with their status."""
    import trio

    from events.store import Draft, open_store
    from events.types import ArtifactStored, FileEdited, FileReverted, ProjectCreated, SessionCreated, ToolStarted

    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    async def write_log() -> None:
        async with open_store(cwd / ".lens") as store:
            async def put(event: Any, agent: str = "main") -> None:
                await store.append(Draft(event, project_id="prj_ch", session_id="ses_ch", agent_id=agent))

            await store.append(Draft(ProjectCreated(name="Changes", workspace=str(workspace)), project_id="prj_ch"))
            await put(SessionCreated(model="faux/faux-1"))
            await put(ToolStarted(call_id="c1", name="edit_file", arguments="{}"))
            await put(ArtifactStored(artifact_id="a" * 64, sha256="a" * 64, mime="application/octet-stream", size=42))
            await put(FileEdited(call_id="c1", path="src/app.py", after_artifact_id="a" * 64, after_sha256="a" * 64))
            await put(ToolStarted(call_id="c2", name="edit_file", arguments="{}"), "sub_c9")
            await put(FileEdited(call_id="c2", path="notes.txt", after_artifact_id="b" * 64, after_sha256="b" * 64),
                      "sub_c9")
            await put(FileReverted(call_id="c3", reverted_call_id="c2", paths=["notes.txt"]))

    trio.run(write_log)
    daemon = Daemon(cwd)
    try:
        token = daemon.pair("dash-changes", strong=False)
        driver = browser
        open_in_page(driver, daemon, token, "ses_ch")
        wait_for(lambda: len(texts(driver, "#changes li.card .sub")) == 2, "the changed files")
        assert texts(driver, "#changes li.card .sub") == ["notes.txt", "src/app.py"]
        assert texts(driver, "#changes li.card .pill") == ["reverted", "created · 42 B"]
        assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    finally:
        daemon.stop()


def reopen_read_only(driver: Any, readonly: str, session_id: str) -> None:
    """Disconnect, connect again with the read-only credential ``readonly`` and open the session."""
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    connect(driver, readonly)
    wait_for(lambda: body_data(driver, "trust") == "read", "read-only trust")
    wait_for(lambda: by_css(driver, f"#sessions button[data-session-id='{session_id}']"), "the session list")
    click(driver, f"#sessions button[data-session-id='{session_id}']")


def test_dashboard_shows_the_context_and_compacts_it_from_the_page(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The session pane's Context panel (GET /sessions/{id}/context, F-CTX-2/3): the estimated
    size against the window, the items in context; "Compact now" summarizes an idle session's
    older items (POST /sessions/{id}/compact) and the panel shows it. A read-only credential
    sees the panel without the button."""
    driver = browser
    readonly = daemon.pair("dash-context-read", strong=False)
    strong, session_id = open_session(driver, daemon, tmp_path, "dash-context")
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: any(a.startswith("The tool answered:") for a in committed_answers(driver)), "the answer to the tool")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#context dd[data-key='items']") == ["4 in context of 4"], "the context panel")
    tokens = texts(driver, "#context dd[data-key='tokens']")[0]
    assert tokens.startswith("~") and " of " in tokens and tokens.endswith("%)"), tokens
    assert texts(driver, "#context dd[data-key='compactions']") == ["0"]
    wait_for(lambda: one(driver, "#compact").is_enabled(), "the compact button")
    click(driver, "#compact")
    wait_for(lambda: texts(driver, "#context dd[data-key='compactions']") == ["1"], "the compaction in the panel")
    assert texts(driver, "#context dd[data-key='compacted']"), texts(driver, "#context dd")
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert status == 200 and described["compactions"] == 1
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    reopen_read_only(driver, readonly, session_id)
    wait_for(lambda: texts(driver, "#context dd[data-key='compactions']") == ["1"], "the panel, read-only")
    assert not one(driver, "#compact").is_displayed()


def test_dashboard_snips_a_tool_result_and_includes_it_again(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """F-CTX-3 from the page: a tool result in the model's context has "Snip" (POST
    …/context/snip); a snipped one is marked so and has "Include" (POST …/context/include); the
    Context panel counts both. A read-only credential sees the mark and no button."""
    driver = browser
    readonly = daemon.pair("dash-snip-read", strong=False)
    strong, session_id = open_session(driver, daemon, tmp_path, "dash-snip")
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Snip"], "the result's Snip button")
    assert texts(driver, "#timeline .tool .ctx-mark") == []
    click(driver, "#timeline .tool .ctx-edit")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-mark") == ["snipped"], "the result marked snipped")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Include"], "the Include button")
    wait_for(lambda: texts(driver, "#context dd[data-key='snipped']") == ["1"], "the panel's snipped count")
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert status == 200 and [i["context"] for i in described["items"] if i["role"] == "tool_result"] == ["snipped"]

    click(driver, "#timeline .tool .ctx-edit")
    wait_for(lambda: texts(driver, "#context dd[data-key='included']") == ["1"], "the panel's included count")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Snip"], "Snip again")
    assert texts(driver, "#timeline .tool .ctx-mark") == []
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert [i["context"] for i in described["items"] if i["role"] == "tool_result"] == ["included"]
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    # snipped again over HTTP: a read-only reader sees the mark, and no button
    status, _ = daemon.request("POST", f"/sessions/{session_id}/context/snip",
                               {"itemIds": [i["id"] for i in described["items"] if i["role"] == "tool_result"]}, token=strong)
    assert status == 200
    reopen_read_only(driver, readonly, session_id)
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-mark") == ["snipped"], "the mark, read-only")
    assert by_css(driver, "#timeline .tool .ctx-edit") == []


def test_dashboard_marks_a_result_whose_call_was_snipped_as_out_and_includes_it(daemon: Daemon, browser: Any,
                                                                                tmp_path: Path) -> None:
    """A result whose call was snipped (over HTTP: the page snips results) goes out of the model's
    context with its call (mark ``removed``). The page showed it as in context with a "Snip" that
    changed nothing; it is marked out, counted, and has "Include", which brings the pair back."""
    driver = browser
    strong, session_id = open_session(driver, daemon, tmp_path, "dash-removed")
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Snip"], "the result's Snip button")
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    call_id = next(i["id"] for i in described["items"] if i["role"] == "tool_call")
    status, _ = daemon.request("POST", f"/sessions/{session_id}/context/snip", {"itemIds": [call_id]}, token=strong)
    assert status == 200
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert [i["context"] for i in described["items"] if i["role"] == "tool_result"] == ["removed"]
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-mark") == ["removed"], "the result marked out")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Include"], "the Include button")
    wait_for(lambda: texts(driver, "#context dd[data-key='removed']") == ["1"], "the panel's removed count")
    click(driver, "#timeline .tool .ctx-edit")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-edit") == ["Snip"], "Snip again")
    assert texts(driver, "#timeline .tool .ctx-mark") == []
    status, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert [i["context"] for i in described["items"] if i["role"] in ("tool_call", "tool_result")] == [
        "included", "included"]
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")


# --------------------------------------------------------------------------- the default model (F-MOD-5)


MODEL_KEY_ENV = "LENS_TEST_DASHBOARD_MODEL_UNSET_KEY"
# The built-in real providers' models, listed after the config's and without their keys (the
# suite clears OPENAI_API_KEY and ANTHROPIC_API_KEY): choosable, marked "no key".
BUILTIN_REFS = [f"{b.id}/{m}" for b in BUILTINS for m, _ in b.models]


def test_dashboard_hides_snips_and_puts_back_messages_and_tool_calls(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """F-CTX-3 and F-TOOL-7 from the page: each message has a "context" disclosure with Snip /
    Unsnip and Hide / Unhide (POST …/context/snip | unsnip | hide | unhide), a tool call card a
    Hide / Unhide for the call and its result; the item's mark is a label, redrawn as the edits'
    events arrive (an edit made elsewhere too); a keyboard user's focus stays on the item's new
    button. A read-only credential sees the marks and no control."""
    from selenium.webdriver.common.keys import Keys

    driver = browser
    readonly = daemon.pair("dash-hide-read", strong=False)
    strong, session_id = open_session(driver, daemon, tmp_path, "dash-hide")
    submit(driver, "my zorilla pasted by mistake")
    wait_for(lambda: len(committed_answers(driver)) == 1 and body_data(driver, "sessionStatus") == "idle", "the answer")
    user = "#timeline .msg.user"
    assert by_css(driver, f"{user} .ctx-mark") == [] and by_css(driver, f"{user} .ctx-edits button") == []
    click(driver, f"{user} .ctx-edits summary")
    wait_for(lambda: texts(driver, f"{user} .ctx-edits button") == ["Snip", "Hide"], "the message's edits")
    click(driver, f"{user} .ctx-edits button.ctx-hide")
    wait_for(lambda: texts(driver, f"{user} .ctx-mark") == ["hidden"], "the message marked hidden")
    wait_for(lambda: texts(driver, f"{user} .ctx-edits button") == ["Unhide"], "Unhide (its disclosure kept open)")
    _, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    user_id = described["items"][0]["id"]
    assert described["items"][0]["context"] == "hidden" and user_id not in described["workingItemIds"]
    assert daemon.request("GET", f"/history/items/{user_id}", token=strong)[0] == 404

    # Unhidden by the keyboard: the focus goes to the message's new Hide.
    press(driver, f"{user} .ctx-edits button.ctx-hide", Keys.ENTER)
    wait_for(lambda: texts(driver, f"{user} .ctx-edits button") == ["Snip", "Hide"], "Snip and Hide again")
    assert texts(driver, f"{user} .ctx-mark") == []
    wait_for(lambda: driver.execute_script("const a = document.activeElement; return a.matches('.msg.user button.ctx-hide')"
                                           " && a.textContent"), "the focus on the new Hide")
    assert daemon.request("GET", f"/history/items/{user_id}", token=strong)[0] == 200

    # The answer: snipped, then unsnipped.
    answer = "#timeline .msg.assistant"
    click(driver, f"{answer} .ctx-edits summary")
    wait_for(lambda: texts(driver, f"{answer} .ctx-edits button") == ["Snip", "Hide"], "the answer's edits")
    click(driver, f"{answer} .ctx-edits button.ctx-edit")
    wait_for(lambda: texts(driver, f"{answer} .ctx-mark") == ["snipped"], "the answer marked snipped")
    wait_for(lambda: texts(driver, f"{answer} .ctx-edits button") == ["Unsnip", "Hide"], "Unsnip")
    wait_for(lambda: texts(driver, "#context dd[data-key='snipped']") == ["1"], "the panel's snipped count")
    click(driver, f"{answer} .ctx-edits button.ctx-edit")
    wait_for(lambda: texts(driver, f"{answer} .ctx-mark") == [], "the answer back")

    # A tool call and its result: hidden and unhidden together.
    submit(driver, "/tool get_system_time {}")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-hide") == ["Hide"] and body_data(driver, "sessionStatus") == "idle",
             "the call's Hide")
    assert texts(driver, "#timeline .tool .ctx-edit") == ["Snip"]
    click(driver, "#timeline .tool .ctx-hide")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-mark") == ["hidden"], "the call marked hidden")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-hide") == ["Unhide"], "the call's Unhide")
    assert by_css(driver, "#timeline .tool .ctx-edit") == []  # (no Include of a hidden result)
    _, described = daemon.request("GET", f"/sessions/{session_id}/context", token=strong)
    assert [i["context"] for i in described["items"] if i["role"] in ("tool_call", "tool_result")] == ["hidden", "hidden"]
    click(driver, "#timeline .tool .ctx-hide")
    wait_for(lambda: texts(driver, "#timeline .tool .ctx-hide") == ["Hide"], "the call's Hide again")
    assert texts(driver, "#timeline .tool .ctx-mark") == [] and texts(driver, "#timeline .tool .ctx-edit") == ["Snip"]

    # An edit made elsewhere: the page shows it as its event arrives.
    status, _ = daemon.request("POST", f"/sessions/{session_id}/context/hide", {"itemIds": [user_id]}, token=strong)
    assert status == 200
    wait_for(lambda: texts(driver, f"{user} .ctx-mark") == ["hidden"], "the hide made elsewhere")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []

    reopen_read_only(driver, readonly, session_id)
    wait_for(lambda: texts(driver, f"{user} .ctx-mark") == ["hidden"], "the mark, read-only")
    assert by_css(driver, "#timeline .ctx-edits") == [] and by_css(driver, "#timeline .ctx-hide") == []


def model_config(other_enabled: bool = True) -> dict[str, Any]:
    """CONFIG with more providers: another faux one, a disabled one and one whose key is not set."""
    config = json.loads(json.dumps(CONFIG))
    config["providers"] += [
        {"id": "other", "protocol": "faux", "enabled": other_enabled, "models": [{"id": "x1"}]},
        {"id": "off", "protocol": "anthropic", "enabled": False, "models": [{"id": "c2"}]},
        {"id": "keyed", "protocol": "anthropic", "baseUrl": "http://127.0.0.1:9", "apiKeyEnv": MODEL_KEY_ENV,
         "models": [{"id": "k1"}]},
    ]
    return config


def shown_default(driver: Any) -> list[str] | None:
    """[effective model, source, the source as the page words it] of the Default model panel."""
    return driver.execute_script("""
        const e = document.querySelector('#model-default dd[data-key="effective"]');
        const s = document.querySelector('#model-default dd[data-key="source"]');
        return e && s ? [e.textContent, s.dataset.source, s.textContent] : null""")


def model_options(driver: Any) -> list[list[Any]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#model-choice option'), o => [o.value, o.textContent, o.disabled])")


def choose_model(driver: Any, ref: str) -> None:
    from selenium.webdriver.support.ui import Select
    Select(one(driver, "#model-choice")).select_by_value(ref)


def saved_default(d: Daemon, token: str) -> dict[str, Any]:
    status, body = d.request("GET", "/models", token=token)
    assert status == 200, body
    return body["default"]


def test_dashboard_model_panel_shows_sets_and_clears_the_default_and_shows_a_refusal(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The Default model panel: the effective default and where it comes from, the listed models
    (a disabled provider's cannot be chosen; a key-less one can, marked), "Set as default" and
    "Clear saved default" (PUT /models/default, the page showing its answer), and the daemon's
    refusal of a model whose provider was disabled after the page listed it."""
    started = time.monotonic()
    assert MODEL_KEY_ENV not in os.environ
    driver = browser
    d = make_daemon(model_config())
    strong = d.pair("dash-model", strong=True)
    driver.get(d.base + "/")
    # (a page in the background makes no light read: the requests counted below are the page's
    # own, and the list stays as it was until the refusal has it read again)
    driver.execute_script("Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})")
    connect(driver, strong)
    config_default = ["faux/faux-1", "config", "config (defaultModel)"]
    wait_for(lambda: shown_default(driver) == config_default, "the effective default")
    assert model_options(driver) == [
        ["faux/faux-1", "faux/faux-1 — default", False],
        ["other/x1", "other/x1", False],
        ["off/c2", "off/c2 — provider disabled", True],
        ["keyed/k1", "keyed/k1 — no key", False],
        *[[ref, f"{ref} — no key", False] for ref in BUILTIN_REFS],
    ]
    assert one(driver, "#model-choice").get_attribute("value") == "faux/faux-1"
    # The new-session Model field suggests the models that can be chosen (not a disabled provider's).
    assert driver.execute_script(
        "return Array.from(document.querySelectorAll('#session-models option'), o => o.value)") == [
        "faux/faux-1", "other/x1", "keyed/k1", *BUILTIN_REFS]
    assert one(driver, "#session-model").get_attribute("list") == "session-models"
    assert one(driver, "#model-set").is_enabled()
    assert not one(driver, "#model-clear").is_enabled()  # nothing is saved while the config's is in effect

    # Set: the page shows the PUT's answer (it asks nothing else), and the daemon has saved it.
    choose_model(driver, "other/x1")
    network_requests(driver, d.base)
    click(driver, "#model-set")
    wait_for(lambda: shown_default(driver) == ["other/x1", "saved", "saved default"], "the saved default")
    assert network_requests(driver, d.base) == [("PUT", "/api/v1/models/default", True)]
    assert saved_default(d, strong) == {"effective": "other/x1", "source": "saved", "saved": "other/x1"}
    assert ["other/x1", "other/x1 — default", False] in model_options(driver)
    assert ["faux/faux-1", "faux/faux-1", False] in model_options(driver)

    # A model whose key is not set can be saved (the key may be set before the next start); the
    # panel says new sessions would fail until it is.
    choose_model(driver, "keyed/k1")
    click(driver, "#model-set")
    wait_for(lambda: shown_default(driver) == ["keyed/k1", "saved", "saved default"], "the key-less default")
    assert "no key" in one(driver, "#model-note").text
    assert saved_default(d, strong) == {"effective": "keyed/k1", "source": "saved", "saved": "keyed/k1"}

    # Clear: the config's default is in effect again.
    wait_for(lambda: one(driver, "#model-clear").is_enabled(), "the clear button")
    click(driver, "#model-clear")
    wait_for(lambda: shown_default(driver) == config_default, "the cleared default")
    assert saved_default(d, strong) == {"effective": "faux/faux-1", "source": "config", "saved": None}
    assert one(driver, "#model-choice").get_attribute("value") == "faux/faux-1"
    assert one(driver, "#model-note").text == ""
    wait_for(lambda: not one(driver, "#model-clear").is_enabled(), "the clear button disabled again")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    # The daemon restarts with "other" disabled while the page still lists it as it was: the
    # daemon refuses, the page shows its code and message, and lists the models as they are now.
    choose_model(driver, "other/x1")
    (d.cwd / "config" / "lens.jsonc").write_text(json.dumps(model_config(other_enabled=False)))
    d.restart()
    click(driver, "#model-set")
    wait_for(lambda: by_css(driver, "#errors li[data-code='PROVIDER_DISABLED']"), "the daemon's refusal shown")
    assert "'other' is disabled" in one(driver, "#errors li[data-code='PROVIDER_DISABLED']").text
    wait_for(lambda: ["other/x1", "other/x1 — provider disabled", True] in model_options(driver),
             "the list as the daemon has it now")
    assert shown_default(driver) == config_default
    assert one(driver, "#model-choice").get_attribute("value") == "faux/faux-1"
    assert saved_default(d, strong) == {"effective": "faux/faux-1", "source": "config", "saved": None}
    assert console_errors(driver) == []
    assert time.monotonic() - started < 45, "the test must stay bounded"


def test_dashboard_model_panel_is_read_only_without_strong_trust(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A read-only credential sees the default and the models, with the choice disabled and no
    buttons; the daemon is what refuses: a page made to send the change anyway shows its 403."""
    driver = browser
    d = make_daemon(model_config())
    readonly = d.pair("dash-model-read", strong=False)
    driver.get(d.base + "/")
    connect(driver, readonly)
    wait_for(lambda: body_data(driver, "trust") == "read", "read-only trust")
    wait_for(lambda: shown_default(driver) == ["faux/faux-1", "config", "config (defaultModel)"], "the effective default")
    assert [o[0] for o in model_options(driver)] == ["faux/faux-1", "other/x1", "off/c2", "keyed/k1", *BUILTIN_REFS]
    choice = one(driver, "#model-choice")
    assert choice.is_displayed() and not choice.is_enabled()
    for sel in ("#model-set", "#model-clear"):
        assert not one(driver, sel).is_displayed(), f"{sel} is shown to a read-only credential"
        assert not one(driver, sel).is_enabled()
    assert "Read-only credential" in one(driver, "#model-note").text

    driver.execute_script("document.getElementById('model-form').requestSubmit()")
    wait_for(lambda: by_css(driver, "#errors li[data-code='FORBIDDEN']"), "the daemon's refusal shown")
    assert saved_default(d, readonly) == {"effective": "faux/faux-1", "source": "config", "saved": None}
    assert console_errors(driver) == []


def test_dashboard_shows_a_read_only_reader_the_questions_options_and_why_it_cannot_answer(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A read-only credential watching a session that asks sees each question with its options,
    disabled, and a note saying what needs strong trust. The options were hidden with the
    controls (the reader saw "Colour?" and nothing to choose from), and nothing said why the page
    offered no way to send, answer or abort."""
    driver = browser
    readonly = daemon.pair("dash-ro-question-read", strong=False)
    strong, sid = open_session(driver, daemon, tmp_path, "dash-ro-question")
    assert not one(driver, "#read-only-note").is_displayed()
    submit(driver, "ask two questions")
    wait_for(lambda: texts(driver, "#timeline .question > .text") == ["Colour?", "Size?"], "both questions")

    reopen_read_only(driver, readonly, sid)
    wait_for(lambda: texts(driver, "#timeline .question > .text") == ["Colour?", "Size?"], "both questions, read-only")
    # (the stream, connected after the view's read, can still draw the questions again)
    becomes(lambda: [(b.text, b.is_displayed(), b.is_enabled())
                     for b in by_css(driver, "#timeline .question button[data-option-id]")],
            [("Red", True, False), ("Blue", True, False), ("Big", True, False), ("Small", True, False)], "the options disabled")
    becomes(lambda: [n.is_displayed() for n in by_css(driver, "#timeline .question .actions")], [False],
            "the questions' actions hidden")
    note = one(driver, "#read-only-note")
    assert note.is_displayed() and "strong-trust" in note.text and "answering questions" in note.text, note.text
    assert not one(driver, "#composer").is_displayed()
    assert console_errors(driver) == []


def test_dashboard_says_when_a_withdraw_came_too_late(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Withdraw on a queued input that the agent took meanwhile: the daemon answers 200 with the
    input's status (`settled`), not an error. The page showed nothing, as if it had been
    withdrawn; it now says it was not, as it says of a steer that came too late."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-late-withdraw")
    submit(driver, "ask two questions")
    wait_for(lambda: by_css(driver, "#timeline .question"), "the question")
    assert daemon.request("POST", f"/sessions/{sid}/inputs", {"requestId": "late", "content": "withdrawn too late"},
                          token=strong)[0] == 202
    wait_for(lambda: by_css(driver, "#queue li[data-request-id='late'] button"), "the queued input")
    # The reader's click, on the row as it was shown, lands after the input ran.
    assert driver.execute_script("""window.staleWithdraw = document.querySelector("#queue li[data-request-id='late'] button");
                                    return window.staleWithdraw.textContent""") == "Withdraw"
    qid = daemon.request("GET", f"/sessions/{sid}", token=strong)[1]["questions"][0]["questionId"]
    assert daemon.request("POST", f"/sessions/{sid}/questions/{qid}/answer", {"kind": "skip"}, token=strong)[0] == 200
    wait_for(lambda: "(faux) You said: withdrawn too late" in committed_answers(driver), "the input's answer")
    assert not by_css(driver, "#errors li")
    driver.execute_script("window.staleWithdraw.click()")
    shown = wait_for(lambda: texts(driver, "#errors li[data-code='INPUT_NOT_QUEUED'] span[dir]"), "the refusal shown")
    assert shown == ["not withdrawn: input late is settled (it already ran)"], shown
    assert console_errors(driver) == []


def test_dashboard_lists_the_jobs_of_a_long_session(browser: Any, tmp_path: Path) -> None:
    """The jobs panel shows the session view's `jobs`, which the log's every event feeds, and
    follows a job live. It scanned the session's log from its start instead, at most 20 pages of
    1,000 events, so a job started after the 20,000th event of a session was never listed."""
    import trio

    from events.store import Draft, open_store
    from events.types import JobFinished, JobStarted, ProjectCreated, SessionCreated, SessionNamed

    cwd = tmp_path / "daemon"
    cwd.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    async def write_log() -> None:
        ids = {"project_id": "prj_long", "session_id": "ses_long"}
        async with open_store(cwd / ".lens") as store:
            await store.append(Draft(ProjectCreated(name="Long project", workspace=str(workspace)), project_id="prj_long"))
            await store.append(Draft(SessionCreated(model="faux/faux-1"), **ids))
            await store.append(Draft(JobStarted(job_id="early", command="make early"), **ids))
            for start in range(0, 20_100, 500):
                await store.append(*(Draft(SessionNamed(name=f"name {i}"), **ids) for i in range(start, start + 500)))
            await store.append(Draft(JobStarted(job_id="late", command="make late"), **ids))
            await store.append(Draft(JobFinished(job_id="late", status="crashed", exit_code=None,
                                                 reason="killed by signal 9"), **ids))

    trio.run(write_log)
    daemon = Daemon(cwd, with_turns(jobs_turn("exit 3")))
    try:
        token = daemon.pair("dash-long-jobs", strong=True)
        driver = browser
        open_in_page(driver, daemon, token, "ses_long")
        wait_for(lambda: "make late" in texts(driver, "#jobs li.card .sub"), "the job after the 20,000th event", 20)
        assert texts(driver, "#jobs li.card .sub") == ["make early", "make late"]
        [late] = texts(driver, "#jobs li.card[data-job-id='late']")
        assert "crashed" in late and "killed by signal 9" in late, late
        # A job the agent starts now is listed, and its end shown, as the stream brings them.
        submit(driver, "start a job")
        wait_for(lambda: texts(driver, "#jobs li.card .sub")[2:] == ["exit 3"]
                 and "exited (3)" in texts(driver, "#jobs li.card")[2], "the new job's end", 20)
    finally:
        daemon.stop()


def test_dashboard_backs_off_from_a_stream_that_ends_at_a_damaged_event(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A stream whose replay reaches an event the log cannot read ends with `stream.end`
    (`EVENT_CORRUPT`), and so does every resume from the same place. The page retries it with its
    backoff and says why in the connection pill's tooltip. The `stream.end` frame itself counted as
    a healthy stream and reset the backoff, so the page asked again every half second, for ever."""

    driver = browser
    d = make_daemon(with_turns())
    strong = d.pair("dash-damaged", strong=True)
    # While the daemon is away, two events are written after what the page saw; the first is damaged.
    sid, project, seen = seen_then_stopped(driver, d, strong, tmp_path)
    last = renamed_while_stopped(d, project, sid, times=2)
    con = sqlite3.connect(d.cwd / ".lens" / "events.db", timeout=5)
    try:
        damaged = con.execute("SELECT min(seq) FROM events WHERE seq > ? AND session_id = ?", (seen, sid)).fetchone()[0]
        assert damaged is not None and damaged < last
        con.execute("UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (damaged,))
        con.commit()
    finally:
        con.close()
    driver.execute_script(COUNT_STREAMS)
    d.start()
    wait_for(lambda: str(damaged) in (one(driver, "#conn").get_attribute("title") or ""), "the reason in the tooltip", 20)
    asked = stream_requests(driver)
    deadline = time.monotonic() + 3.0  # an observation window: retries every 0.5 s would ask 6 times
    while time.monotonic() < deadline:
        time.sleep(0.1)
    assert stream_requests(driver) - asked <= 3, "the page did not back off"
    assert "EVENT_CORRUPT" in one(driver, "#conn").get_attribute("title")
    assert console_errors(driver) == []


def test_dashboard_keeps_what_was_typed_while_a_send_was_on_its_way(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The daemon acknowledges an input once it is durable; text typed into the box meanwhile is
    the next message. The page emptied the box when the acknowledgement came, losing that text; it
    now takes out only what it sent."""
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-typing")
    driver.execute_script("""
        const real = window.fetch;
        let release; const gate = new Promise((r) => { release = r; });
        window.releaseSend = () => release();
        window.fetch = async (...args) => {
          const r = await real(...args);
          if (String(args[0]).endsWith('/inputs')) { window.sendHeld = true; await gate; }
          return r;
        };""")
    submit(driver, "the first message")
    wait_for(lambda: driver.execute_script("return window.sendHeld === true"), "the send on its way")
    one(driver, "#input").send_keys("the next one")
    driver.execute_script("window.releaseSend()")
    wait_for(lambda: "Sent" in one(driver, "#composer-note").text, "the send acknowledged")
    assert one(driver, "#input").get_attribute("value") == "the next one"
    wait_for(lambda: "(faux) You said: the first message" in committed_answers(driver), "the first message's answer")
    assert texts(driver, "#timeline .msg.user .text") == ["the first message"]

# --------------------------------------------------------------------------- gaps left by the audit


def test_dashboard_forgetting_the_credential_leaves_nothing_it_read_in_the_page(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The "Forget credential" button hid the session pane and left its nodes (the timeline, queue, jobs,
    usage, recent events…) in the page until another session opened."""
    driver = browser
    _, sid = open_session(driver, daemon, tmp_path, "dash-forget")
    answered(driver, "a private note 7f3a", "the answer")
    one(driver, "#input").send_keys("a draft 9c1e")
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    page = driver.execute_script("return document.documentElement.outerHTML")
    for secret in ("7f3a", "9c1e", sid, "faux/faux-1", "dash-forget"):   # (the last: the client id)
        assert secret not in page, secret
    assert one(driver, "#input").get_attribute("value") == ""
    assert driver.execute_script("return Object.keys(document.body.dataset).filter(k => k !== 'trust' && k !== 'conn')") == []
    assert console_errors(driver) == []


def test_dashboard_offers_no_send_or_abort_on_a_deleted_session_and_says_why(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """A session another client deleted while it is watched: the composer and "Abort run" were
    still offered, and the daemon refused each use (`SESSION_DELETED`). They are now disabled,
    and a note says why."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-deleted")
    one(driver, "#input").send_keys("typed before the delete")
    assert one(driver, "#send").is_enabled() and not any(n.is_displayed() for n in by_css(driver, "#closed-note"))
    assert daemon.request("DELETE", f"/sessions/{sid}", token=strong)[0] == 200
    wait_for(lambda: body_data(driver, "sessionStatus") == "deleted", "the session shown deleted")
    next_frame(driver)
    assert [n.is_enabled() for n in by_css(driver, "#send, #input, #abort")] == [False, False, False]
    assert one(driver, "#abort").is_displayed()
    note = one(driver, "#closed-note")
    assert note.is_displayed() and "deleted" in note.text and "no more inputs" in note.text, note.text
    # Ctrl+Enter sends nothing either (the box is disabled); no refusal was asked for.
    driver.execute_script("document.getElementById('composer').requestSubmit()")
    next_frame(driver)
    assert not by_css(driver, "#errors li[data-code='SESSION_DELETED']")
    assert console_errors(driver) == []


def restart_with_its_first_input_damaged(d: Daemon, sid: str) -> None:
    """Stop the daemon, damage the session's first input in the log (a zstd frame of nothing:
    replaying it fails, so the session is quarantined once woken) and start it again."""
    d.stop()
    con = sqlite3.connect(d.cwd / ".lens" / "events.db", timeout=5)
    try:
        con.execute("UPDATE events SET body = X'28b52ffd0000' WHERE seq = (SELECT min(seq) FROM events "
                    "WHERE session_id = ? AND kind = 'input.submitted')", (sid,))
        con.commit()
    finally:
        con.close()
    d.start()


def test_dashboard_offers_no_send_on_a_quarantined_session_it_cannot_read(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A watched session whose log is damaged before what the page saw: after a restart its actor
    cannot replay it, the daemon quarantines it and its view cannot be read
    (`SESSION_QUARANTINED`). The page kept offering the composer; now it says why it does not."""

    driver = browser
    d = make_daemon(with_turns())
    _, sid = open_session(driver, d, tmp_path, "dash-quarantined")
    answered(driver, "something to replay", "the answer")
    restart_with_its_first_input_damaged(d, sid)
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_QUARANTINED']"), "the refusal to read it", 20)
    wait_for(lambda: not one(driver, "#send").is_enabled(), "the composer disabled")
    assert not one(driver, "#input").is_enabled()
    note = one(driver, "#closed-note")
    assert note.is_displayed() and "quarantined" in note.text, note.text
    assert one(driver, "#session-status").text == "quarantined"
    assert console_errors(driver) == []


def test_dashboard_lists_follow_what_other_clients_make_rename_and_delete(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Another client's new project and session, a rename and a delete show in the lists without
    ↻: the watched session's own rename as its stream brings it, the rest by a light read of
    the lists. They showed only after ↻ (or the watched session's next status change)."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-lists")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = driver.execute_script("return document.querySelector('#projects button.selected').dataset.projectId")
    session_row = "#sessions button[data-session-id='{}']".format

    status, other = daemon.request("POST", "/sessions", {"projectId": project, "name": "made elsewhere"}, token=strong)
    assert status == 201, other
    wait_for(lambda: "made elsewhere" in one(driver, session_row(other["id"])).text, "another client's session", 20)
    status, made = daemon.request("POST", "/projects", {"name": "Project made elsewhere", "workspace": str(elsewhere)},
                                  token=strong)
    assert status == 201, made
    wait_for(lambda: by_css(driver, f"#projects button[data-project-id='{made['id']}']"), "another client's project", 20)
    assert daemon.request("PATCH", f"/sessions/{other['id']}", {"name": "renamed elsewhere"}, token=strong)[0] == 200
    wait_for(lambda: "renamed elsewhere" in one(driver, session_row(other["id"])).text, "the rename", 20)
    assert daemon.request("DELETE", f"/sessions/{other['id']}", token=strong)[0] == 200
    wait_for(lambda: not by_css(driver, session_row(other["id"])), "the deleted session gone from the list", 20)
    # The watched session's rename arrives on its stream; the list follows it.
    assert daemon.request("PATCH", f"/sessions/{sid}", {"name": "watched, renamed"}, token=strong)[0] == 200
    wait_for(lambda: "watched, renamed" in one(driver, session_row(sid)).text, "the watched session's rename", 20)
    # What the reader chose stays chosen. (the lists are drawn again as the reads the stream's
    # events call for come back: one read of the page each)
    assert attrs(driver, "#projects button.selected", "data-project-id") == [[project]]
    assert attrs(driver, "#sessions button.selected", "data-session-id") == [[sid]]
    assert console_errors(driver) == []


def test_dashboard_jobs_panel_reads_a_jobs_output_and_stops_it(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A job's card offers its output (any credential) and, while it runs, a Stop button (strong
    trust). The panel showed neither, though the daemon has `GET …/jobs/{jobId}` and `POST …/stop`."""
    driver = browser
    d, strong, sid, (job_id,) = session_starting_jobs(make_daemon, driver, tmp_path, "dash-jobs",
                                                      "printf 'job says hello\\n'; sleep 600")
    readonly = d.pair("dash-jobs-read", strong=False)
    card = "#jobs li.card"
    wait_for(lambda: "running" in one(driver, card).text, "the running job")

    def output_reads_hello() -> bool:
        pre = by_css(driver, f"{card} .job-out pre")
        if pre and "job says hello" in pre[0].text:
            return True
        more = by_css(driver, f"{card} button.job-more") or ([] if pre else by_css(driver, f"{card} button.job-output"))
        if more:
            more[0].click()
        return False

    # A read-only reader reads the output, and is offered no Stop (the note says it needs strong trust).
    reopen_read_only(driver, readonly, sid)
    wait_for(lambda: by_css(driver, f"{card} button.job-output"), "the job's card, read-only")
    wait_for(output_reads_hello, "the job's output, read-only")
    # (the running job's card is drawn again as its output is read: a stale button is found again)
    becomes(lambda: any(b.is_displayed() for b in by_css(driver, f"{card} button.job-stop")), False, "no Stop shown")
    assert "stopping jobs" in one(driver, "#read-only-note").text
    status, body = d.request("POST", f"/sessions/{sid}/jobs/{job_id}/stop", {}, token=readonly)
    assert status == 403, body

    # Strong trust: Stop ends it (recorded as stopped by request), and the card says so.
    click(driver, "#disconnect")
    wait_for(lambda: one(driver, "#cred").is_displayed(), "the credential field")
    connect(driver, strong)
    click(driver, f"#sessions button[data-session-id='{sid}']")
    wait_for(lambda: by_css(driver, f"{card} button.job-stop"), "the Stop button")
    click(driver, f"{card} button.job-stop")
    wait_for(lambda: "stopped" in one(driver, card).text, "the stopped job", 20)
    jobs = d.request("GET", f"/sessions/{sid}/jobs", token=strong)[1]["jobs"]
    assert [(j["jobId"], j["status"], j["reason"]) for j in jobs] == [(job_id, "stopped", "stopped by request")], jobs
    assert not by_css(driver, f"{card} button.job-stop")
    # A stopped job's output is still there to read, to its end.
    wait_for(output_reads_hello, "the stopped job's output")
    assert not by_css(driver, f"{card} button.job-more")
    assert not by_css(driver, "#errors li")
    assert console_errors(driver) == []


# --------------------------------------------------------------------------- review of the changes made beside the audits


def test_dashboard_opening_a_quarantined_session_from_the_list_offers_no_send_and_shows_nothing_of_another(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A quarantined session whose view cannot be read (`SESSION_QUARANTINED`), opened from the
    list while another session is watched. Only a watched session's refresh marked it: opened
    from the list, the pane went on showing the other session (its title, status, queue) while
    the composer, enabled and with no note, sent to the quarantined one."""

    driver = browser
    d = make_daemon(with_turns())
    strong, damaged = open_session(driver, d, tmp_path, "dash-quarantined-open")
    answered(driver, "something to replay", "the answer")
    click(driver, "#new-session button")
    other = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId !== arguments[0]"
        " && b.dataset.sessionId", damaged), "the other session")
    wait_for(lambda: one(driver, "#session-title").text == other and body_data(driver, "conn") == "live", "it watched")
    restart_with_its_first_input_damaged(d, damaged)
    wait_for(lambda: d.request("GET", f"/sessions/{damaged}", token=strong)[1]["error"]["code"] == "SESSION_QUARANTINED",
             "the session quarantined", 20)
    wait_for(lambda: body_data(driver, "conn") == "live", "the other session watched again", 20)
    click(driver, f"#sessions button[data-session-id='{damaged}']")
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_QUARANTINED']"), "the refusal to read it")
    wait_for(lambda: one(driver, "#session-status").text == "quarantined", "the session shown quarantined")
    assert one(driver, "#session-title").text == damaged
    assert other not in driver.execute_script("return document.getElementById('session').textContent")
    assert [n.is_enabled() for n in by_css(driver, "#send, #input")] == [False, False]
    note = one(driver, "#closed-note")
    assert note.is_displayed() and "quarantined" in note.text, note.text
    assert console_errors(driver) == []


def test_dashboard_reads_a_jobs_output_once_when_read_more_is_clicked_twice(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A second click on "Read more" before the first read's answer asked for the same bytes again,
    and the page appended both answers: the output showed that part twice."""
    driver = browser
    session_starting_jobs(make_daemon, driver, tmp_path, "dash-jobs-twice", "seq 1 20000")
    card = "#jobs li.card"
    wait_for(lambda: "exited (0)" in one(driver, card).text, "the job's end", 20)
    click(driver, f"{card} button.job-output")
    wait_for(lambda: by_css(driver, f"{card} button.job-more"), "the first part of its output (108,894 bytes: two reads)")
    driver.execute_script("""
        window.jobReads = 0;
        const realText = Response.prototype.text;
        Response.prototype.text = async function () {
          const text = await realText.call(this);
          // (counted once the page has handled the answer: a task runs after the page's await)
          if (this.url.includes('/jobs/')) setTimeout(() => { window.jobReads++; }, 0);
          return text;
        };
        const more = document.querySelector('#jobs li.card button.job-more');
        more.click(); more.click();""")
    wait_for(lambda: driver.execute_script("return window.jobReads") == 2, "both reads answered")
    [shown] = texts(driver, f"{card} .job-out pre")   # (one read: the card is drawn again as its reads come back)
    assert shown == "".join(f"{i}\n" for i in range(1, 20001)), (len(shown), shown.count("\n19999\n"))
    assert not by_css(driver, f"{card} button.job-more")
    assert console_errors(driver) == []


HOLD_NEXT_SESSIONS_READ = """
    let hidden = false;   // (the page then reads the lists only when asked: no light read every 5 s)
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
    window.hidePage = () => { hidden = true; };
    const real = window.fetch;
    let release; const gate = new Promise((r) => { release = r; });
    window.releaseSessionsRead = () => release();
    window.sessionsReadHeld = false;
    window.fetch = async (...args) => {
      const held = !window.sessionsReadHeld && String(args[0]).includes('/sessions?project=');
      if (held) window.sessionsReadHeld = true;
      const r = await real(...args);
      if (held) { window.sessionsReadAnswered = true; await gate; r.held = true; }
      return r;
    };
    const realText = Response.prototype.text;
    Response.prototype.text = async function () {
      const text = await realText.call(this);
      // (set once the page has handled the held answer: a task runs after the page's await)
      if (this.held) setTimeout(() => { window.heldReadHandled = true; }, 0);
      return text;
    };"""


def test_dashboard_lists_follow_a_rename_that_arrives_during_a_light_read(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """The watched session renamed while the lists' light read is on its way: the rename's frame
    asked for the lists again, and was dropped because a read was on its way; that read's answer
    (from before the rename) was shown, and the old name stayed until the next light read (never,
    in a tab in the background)."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-rename-race")
    driver.execute_script(HOLD_NEXT_SESSIONS_READ)
    wait_for(lambda: driver.execute_script("return window.sessionsReadAnswered === true"), "a light read answered", 20)
    driver.execute_script("window.hidePage()")
    assert daemon.request("PATCH", f"/sessions/{sid}", {"name": "renamed meanwhile"}, token=strong)[0] == 200
    wait_for(lambda: one(driver, "#session-title").text == "renamed meanwhile", "the rename's frame")
    driver.execute_script("window.releaseSessionsRead()")
    wait_for(lambda: "renamed meanwhile" in one(driver, f"#sessions button[data-session-id='{sid}']").text,
             "the rename in the list")
    assert console_errors(driver) == []


HIDE_PAGE = "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"


def test_dashboard_lists_follow_a_name_set_back_to_none(daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """``PATCH {"name": null}`` is recorded as a ``session.configured`` reset, not as
    ``session.named``: the lists are read again for it too (a page in the background reads them
    on nothing else)."""
    driver = browser
    strong, sid = open_session(driver, daemon, tmp_path, "dash-name-reset")
    button = f"#sessions button[data-session-id='{sid}']"
    assert daemon.request("PATCH", f"/sessions/{sid}", {"name": "named for a while"}, token=strong)[0] == 200
    wait_for(lambda: "named for a while" in one(driver, button).text, "the name in the list")
    driver.execute_script(HIDE_PAGE)  # (no light read every 5 s from here)
    assert daemon.request("PATCH", f"/sessions/{sid}", {"name": None}, token=strong)[0] == 200
    wait_for(lambda: "named for a while" not in one(driver, button).text, "the name gone from the list")
    assert console_errors(driver) == []


def test_dashboard_keeps_a_session_it_made_while_a_light_read_was_on_its_way(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """"New session" while the lists' light read is on its way: the page read the list for the
    new session, then the light read's answer, from before it, replaced that list, and the session
    the page had just opened (and selected) left the list until the next light read."""
    driver = browser
    _, first = open_session(driver, daemon, tmp_path, "dash-new-race")
    driver.execute_script(HOLD_NEXT_SESSIONS_READ)
    wait_for(lambda: driver.execute_script("return window.sessionsReadAnswered === true"), "a light read answered", 20)
    driver.execute_script("window.hidePage()")
    click(driver, "#new-session button")
    made = wait_for(lambda: driver.execute_script(
        "const b = document.querySelector('#sessions button.selected'); return b && b.dataset.sessionId !== arguments[0]"
        " && b.dataset.sessionId", first), "the new session listed and selected")
    driver.execute_script("window.releaseSessionsRead()")
    wait_for(lambda: driver.execute_script("return window.heldReadHandled === true"), "the light read's answer handled")
    assert by_css(driver, f"#sessions button.selected[data-session-id='{made}']"), texts(driver, "#sessions button")
    assert console_errors(driver) == []


# --------------------------------------------------------------------------- third pass


def test_dashboard_shows_the_recorded_tail_alone_once_the_daemon_no_longer_holds_a_jobs_output(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A job's output read from memory, then "Read more" once the daemon holds it no longer (here a
    restart; an actor's passivation or eight later jobs do the same): the answer is the tail the log
    recorded (its offsets then started again at 0). The page asked the tail from where memory had stopped,
    said the output had ended and showed the tail's note above text read from memory. It now shows
    the recorded tail, from its start, in place of what it showed."""
    driver = browser
    d, strong, sid, (job_id,) = session_starting_jobs(make_daemon, driver, tmp_path, "dash-jobs-tail", "seq 1 20000")
    card = "#jobs li.card"
    wait_for(lambda: "exited (0)" in one(driver, card).text, "the job's end", 20)
    click(driver, f"{card} button.job-output")
    wait_for(lambda: by_css(driver, f"{card} button.job-more"), "the first part of its output, from memory")
    [shown] = texts(driver, f"{card} .job-out pre")   # (one read: the card is drawn again as its reads come back)
    assert shown.startswith("1\n2\n3\n"), shown[:40]
    d.restart()
    wait_for(lambda: body_data(driver, "conn") == "live", "the session watched again", 20)
    status, tail = d.request("GET", f"/sessions/{sid}/jobs/{job_id}?offset=0", token=strong)
    assert status == 200 and tail["source"] == "tail" and tail["eof"], tail
    click(driver, f"{card} button.job-more")
    wait_for(lambda: "log recorded" in one(driver, f"{card} .job-out").text, "the recorded tail")
    assert texts(driver, f"{card} .job-out pre") == [tail["output"]]
    assert tail["output"].endswith("19999\n20000\n")
    assert not by_css(driver, f"{card} button.job-more")
    assert not by_css(driver, "#errors li")
    assert console_errors(driver) == []


def test_dashboard_offers_no_session_control_on_a_quarantined_session_whose_view_it_read_before(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A watched session, read while it was idle, is quarantined (its log damaged before what the
    page saw, then a restart). Send was disabled with a note; "Compact now" and a tool result's
    Snip stayed offered from the view read before, and the daemon refused each use."""

    driver = browser
    d, _, sid, _ = session_starting_jobs(make_daemon, driver, tmp_path, "dash-quarantined-controls",
                                         "printf 'hello\\n'")
    wait_for(lambda: by_css(driver, "#timeline button.ctx-edit") and body_data(driver, "sessionStatus") == "idle",
             "the tool result's Snip on the idle session", 20)
    wait_for(lambda: one(driver, "#compact").is_enabled(), "Compact now offered")
    restart_with_its_first_input_damaged(d, sid)
    wait_for(lambda: by_css(driver, "#errors li[data-code='SESSION_QUARANTINED']"), "the refusal to read it", 20)
    wait_for(lambda: not one(driver, "#send").is_enabled(), "the composer disabled")
    note = one(driver, "#closed-note")
    assert note.is_displayed() and "quarantined" in note.text, note.text
    compact = one(driver, "#compact")
    assert compact.is_displayed() and not compact.is_enabled()
    assert compact.get_attribute("title") == note.text
    # (the timeline can still be drawn again as the page takes the quarantine in: a stale button is found again)
    becomes(lambda: [b.is_enabled() for b in by_css(driver, "#timeline button.ctx-edit")], lambda e: e and not any(e),
            "the tool result's Snip disabled")
    assert console_errors(driver) == []


def test_dashboard_header_says_not_connected_when_the_projects_cannot_be_read_at_connect(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """`GET /whoami` answers, then `GET /projects` fails (here the daemon stops between the two):
    the page forgot the credential but the header went on saying connected, with the client id
    and "Forget credential", and no field to paste one again."""
    driver = browser
    strong = daemon.pair("dash-projects-fail", strong=True)
    driver.get(daemon.base + "/")
    driver.execute_script("""
        const real = window.fetch;
        let release; const gate = new Promise((r) => { release = r; });
        window.releaseProjectsRead = () => release();
        window.fetch = async (...args) => {
          if (/\\/projects(\\?|$)/.test(String(args[0])) && !window.projectsReadHeld) { window.projectsReadHeld = true; await gate; }
          return real(...args);
        };""")
    connect(driver, strong)
    wait_for(lambda: driver.execute_script("return window.projectsReadHeld === true"), "the projects read on its way")
    wait_for(lambda: body_data(driver, "conn") == "connected" and one(driver, "#disconnect").is_displayed(),
             "the header saying connected")
    daemon.stop()
    driver.execute_script("window.releaseProjectsRead()")
    wait_for(lambda: by_css(driver, "#errors li[data-code='NETWORK']"), "the failed read shown")
    assert one(driver, "#cred").is_displayed()
    assert body_data(driver, "conn") == "not"
    assert one(driver, "#conn").text == "not connected"
    assert not any(one(driver, sel).is_displayed() for sel in ("#disconnect", "#client", "#trust"))
    assert driver.execute_script("return document.getElementById('client-id').textContent") == ""
    assert console_errors(driver) == []


def test_dashboard_model_panel_follows_another_clients_change(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Another client saves a default model, then clears it: the panel showed neither before ↻
    (`default_model.set` belongs to no session, so the watched stream does not carry it). The
    light read of the lists now reads the models too; a choice the reader made stays made."""
    driver = browser
    d = make_daemon(model_config())
    strong = d.pair("dash-model-follow", strong=True)
    other = d.pair("dash-model-other", strong=True)
    driver.get(d.base + "/")
    connect(driver, strong)
    config_default = ["faux/faux-1", "config", "config (defaultModel)"]
    wait_for(lambda: shown_default(driver) == config_default, "the effective default")
    status, body = d.request("PUT", "/models/default", {"model": "other/x1"}, token=other)
    assert status == 200, body
    wait_for(lambda: shown_default(driver) == ["other/x1", "saved", "saved default"], "another client's default", 20)
    assert one(driver, "#model-choice").get_attribute("value") == "other/x1"
    assert ["other/x1", "other/x1 — default", False] in model_options(driver)
    wait_for(lambda: one(driver, "#model-clear").is_enabled(), "Clear saved default offered")
    # The reader's own choice is not taken from under it by a change it did not make.
    choose_model(driver, "keyed/k1")
    status, body = d.request("PUT", "/models/default", {"model": None}, token=other)
    assert status == 200, body
    wait_for(lambda: shown_default(driver) == config_default, "another client's clearing", 20)
    assert one(driver, "#model-choice").get_attribute("value") == "keyed/k1"
    assert not one(driver, "#model-clear").is_enabled()
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []



# --------------------------------------------------------------------------- the dashboard's fourth pass


def input_value(driver: Any) -> str:
    return driver.execute_script("return document.getElementById('input').value")


def test_dashboard_puts_a_withdrawn_inputs_text_back_in_the_box_unless_something_was_typed_since(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Withdraw on a queued input: the daemon answers `withdrawn` with the input's text, and the
    page dropped it (the reader who withdrew to edit had to type it again). It goes back into an
    empty box, with its "If busy" choice; what was typed since stays, and the note says so."""
    driver = browser
    open_session(driver, daemon, tmp_path, "dash-withdraw-back")
    submit(driver, "stream slowly please")
    # The steer is sent once the answer streams: one that comes before the model is asked (the
    # session is running from the task's start) is placed before that request, which answers it,
    # and the run ends (that moment lasts about a second, longer on a loaded machine).
    wait_for(lambda: body_data(driver, "sessionStatus") == "running"
             and any("(faux) Streaming the first half" in t for t in texts(driver, "#timeline .msg.streaming .text")),
             "the streaming answer")
    submit(driver, "steer with these words", when_busy="steer")
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["steer with these words"], "the queued input")
    assert input_value(driver) == ""
    from selenium.webdriver.support.ui import Select
    Select(one(driver, "#when-busy")).select_by_value("followUp")
    try:
        click(driver, "#queue li.card button")
    except AssertionError as exc:  # (seen twice in full runs on a loaded machine, never alone: say what the page showed)
        raise AssertionError(f"{exc}; queue {texts(driver, '#queue li')!r}, status {body_data(driver, 'sessionStatus')!r}, "
                             f"box {input_value(driver)!r}, note {one(driver, '#composer-note').text!r}, "
                             f"errors {texts(driver, '#errors li')!r}, "
                             f"timeline {texts(driver, '#timeline .msg .text')[-4:]!r}") from None
    wait_for(lambda: input_value(driver) == "steer with these words", "the withdrawn text back in the box")
    assert one(driver, "#when-busy").get_attribute("value") == "steer"
    assert "back in the box" in one(driver, "#composer-note").text
    wait_for(lambda: texts(driver, "#queue li.card .text") == [], "the queue emptied")

    # Something typed since stays as it is: the withdrawn text is not put in its place.
    submit(driver, "queued again")
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["queued again"], "the queued input again")
    one(driver, "#input").send_keys("something new")
    click(driver, "#queue li.card button")
    wait_for(lambda: "not put back" in one(driver, "#composer-note").text, "the note")
    assert input_value(driver) == "something new"
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")

    # A send whose answer was lost (the daemon queued it), withdrawn and sent again, is a new input:
    # it is not answered as a duplicate of the one withdrawn.
    driver.execute_script(LOSE_NEXT_SEND_ANSWER)
    submit(driver, "lost on its way back")
    wait_for(lambda: by_css(driver, "#errors li[data-code='NETWORK']"), "the failed send")
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["lost on its way back"], "the input the daemon queued")
    click(driver, "#queue li.card button")
    wait_for(lambda: texts(driver, "#queue li.card .text") == [], "the input withdrawn")
    assert input_value(driver) == "lost on its way back"   # (the failed send left it there)
    click(driver, "#send")
    wait_for(lambda: "Sent (seq" in one(driver, "#composer-note").text, "the send answered")
    assert "duplicate" not in one(driver, "#composer-note").text
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["lost on its way back"], "the input queued again")

    # So is one that Abort withdrew (with everything queued).
    driver.execute_script(LOSE_NEXT_SEND_ANSWER)
    submit(driver, "lost before the abort")
    wait_for(lambda: texts(driver, "#queue li.card .text") == ["lost on its way back", "lost before the abort"],
             "the input the daemon queued")
    click(driver, "#abort")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle" and texts(driver, "#queue li.card .text") == [],
             "the aborted run, its queue withdrawn")
    assert input_value(driver) == "lost before the abort"
    click(driver, "#send")
    wait_for(lambda: "(faux) You said: lost before the abort" in committed_answers(driver), "its answer")
    assert console_errors(driver) == []


ONE_QUESTION = {"when": "ask one question", "toolCalls": [{"name": "ask_user", "arguments": {"questions": [
    {"id": "colour", "text": "Colour?", "options": [{"id": "red", "label": "Red"}, {"id": "blue", "label": "Blue"}],
     "allow_text": False}]}}]}


HOLD_ANSWERS = hold_requests("answerRequests", "releaseAnswers", "url.includes('/answer')")


def ask_one_question(make_daemon: Callable[[dict[str, Any]], Daemon], driver: Any, tmp_path: Path,
                     client: str) -> tuple[Daemon, str, str]:
    """A daemon whose model asks ONE_QUESTION, a session opened on the page and asked it: (the
    daemon, a strong token, the session's id)."""
    d = make_daemon(with_turns(ONE_QUESTION))
    strong, sid = open_session(driver, d, tmp_path, client)
    submit(driver, "ask one question")
    return d, strong, sid


def test_dashboard_answers_a_question_once_when_its_option_is_double_clicked(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A double click on a one-click option sent two answers (the second one the daemon's
    `duplicate`). The question's controls are now disabled from the first click, before the
    daemon answers, and one answer is sent."""
    from selenium.webdriver.common.action_chains import ActionChains
    driver = browser
    d, strong, sid = ask_one_question(make_daemon, driver, tmp_path, "dash-question-once")
    option = "#timeline .question button[data-option-id='red']"
    wait_for(lambda: by_css(driver, option), "the question")
    driver.execute_script(HOLD_ANSWERS)
    network_requests(driver, d.base)
    # (the question can be drawn again as the run's events come: an option gone stale before the
    # double click's first move is found again; no click was made with it)
    wait_for(lambda: ActionChains(driver).double_click(one(driver, option)).perform() or True, "the double click")
    wait_for(lambda: driver.execute_script("return window.answerRequests") >= 1, "the answer asked")
    # (the answer is held: the controls are disabled by the click, not by the daemon's answer)
    becomes(lambda: [(b.text, b.is_enabled()) for b in by_css(driver, "#timeline .question button")],
            [("Red", False), ("Blue", False), ("Skip", False)], "the question's controls disabled")
    assert driver.execute_script("return window.answerRequests") == 1
    driver.execute_script("window.releaseAnswers()")
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the answered question")
    wait_for(lambda: body_data(driver, "sessionStatus") == "idle", "the idle session")
    sent = [r for r in network_requests(driver, d.base) if r[0] == "POST" and r[1].endswith("/answer")]
    assert len(sent) == 1, sent
    events = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)[1]["events"]
    assert [e["body"]["answer"] for e in events if e["kind"] == "question.answered"] == [
        {"kind": "answer", "optionIds": ["red"]}]
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_dashboard_says_a_question_settled_meanwhile_was_settled_not_an_error(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """An option clicked on a question that was cancelled meanwhile (the run aborted by another
    client): the daemon refuses it (`QUESTION_SETTLED`), and the page listed that as an error.
    It now says the question was already settled and the answer not taken."""
    driver = browser
    d, strong, sid = ask_one_question(make_daemon, driver, tmp_path, "dash-question-settled")
    wait_for(lambda: by_css(driver, "#timeline .question button[data-option-id='red']"), "the question")
    # The reader's click, on the question as it was shown, lands after another client's abort.
    driver.execute_script("window.staleOption = document.querySelector(\"#timeline .question button[data-option-id='red']\")")
    assert d.request("POST", f"/sessions/{sid}/abort", {}, token=strong)[0] == 200
    wait_for(lambda: not by_css(driver, "#timeline .question"), "the cancelled question gone")
    driver.execute_script("window.staleOption.click()")
    wait_for(lambda: "already settled" in one(driver, "#composer-note").text, "the question said to be settled")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_dashboard_follows_a_running_jobs_open_output_until_the_job_ends(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A running job's output, once opened, showed what the daemon held then; what the job printed
    after showed only when "Read new output" was clicked. The open output now follows the job (a
    light read every 2 s, one at a time) until the job ends; the last read then shows its end. A
    reader at the bottom of the output stays there as it grows; one scrolled up stays where it is."""
    driver = browser
    session_starting_jobs(make_daemon, driver, tmp_path, "dash-jobs-follow",
                          "seq 1 300; while [ ! -e go ]; do sleep 0.1; done; printf 'second line\\n';"
                          " while [ ! -e end ]; do sleep 0.1; done; printf 'last line\\n'")
    workspace = tmp_path / "workspace"   # (the session's, where the job runs)
    card = "#jobs li.card"
    wait_for(lambda: "running" in one(driver, card).text, "the running job")
    first = "".join(f"{i}\n" for i in range(1, 301))
    shown = lambda: one(driver, f"{card} .job-out pre").get_attribute("textContent")  # noqa: E731

    def first_part_shown() -> bool:
        if not by_css(driver, f"{card} .job-out pre"):
            click(driver, f"{card} button.job-output")
            return False
        return shown() == first

    def scroll(to: str) -> int:
        return driver.execute_script(f"const p = document.querySelector('{card} .job-out pre'); p.scrollTop = {to};"
                                     " return p.scrollTop")

    def from_bottom() -> int:
        return driver.execute_script(f"const p = document.querySelector('{card} .job-out pre');"
                                     " return p.scrollHeight - p.scrollTop - p.clientHeight")

    wait_for(first_part_shown, "the job's first part")
    scroll("p.scrollHeight")
    (workspace / "go").touch()
    wait_for(lambda: shown() == first + "second line\n", "the line printed while the output was open")
    assert from_bottom() < 2, "the reader at the bottom was not kept there"
    assert not by_css(driver, f"{card} button.job-more")   # (followed: nothing to ask for)
    top = scroll("40")
    (workspace / "end").touch()
    wait_for(lambda: "exited (0)" in one(driver, card).text, "the job's end")
    wait_for(lambda: shown() == first + "second line\nlast line\n", "what it printed last")
    assert driver.execute_script(f"return document.querySelector('{card} .job-out pre').scrollTop") == top
    assert not by_css(driver, f"{card} button.job-more")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []




def test_dashboard_credential_field_is_not_offered_to_the_password_manager(daemon: Daemon, tmp_path: Path) -> None:
    """The credential field was a password field with `autocomplete="off"`, which password managers
    ignore: Chromium's, asked to save passwords as a person's browser is, took the connect (the form
    hidden after a successful fetch) for a sign-in and showed its "Save password?" prompt
    (`chrome://password-manager-internals` logs each decision). The field is now marked
    `autocomplete="one-time-code"`: a code to use once, never one to save."""
    driver = start_chromium(tmp_path, password_manager=True)
    try:
        strong = daemon.pair("dash-password-manager", strong=True)
        driver.get("chrome://password-manager-internals/")
        internals = driver.current_window_handle
        driver.switch_to.new_window("tab")
        driver.get(daemon.base + "/")
        connect(driver, strong)
        wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
        driver.switch_to.window(internals)
        log = lambda: driver.execute_script("return document.body.innerText")  # noqa: E731
        # (the password manager's handling of the connect: a submission it saw, and the UI state it then took)
        decided = wait_for(lambda: (lambda t: "OnDynamicFormSubmission" in t
                                    and "The new state of the UI" in t.split("OnDynamicFormSubmission", 1)[1] and t)(log()),
                           "the password manager's decision on the connect")
        assert "Decision: ASK the user" not in decided and "Show password prompt" not in decided, decided[-3000:]
    finally:
        driver.quit()


def test_dashboard_shows_a_model_request_a_stop_cut_off_with_its_reason_and_usage(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A graceful stop mid-answer records `model.cut_off` (what the provider had reported; the
    request is asked again at the next start). The page, resuming after the restart, listed it as a
    bare kind; it now says why, the tokens reported and that it is asked again, as a failed request
    names its code, and counts it in the usage it shows."""
    driver = browser
    d = make_daemon(with_turns({"when": "cut me off", "inputTokens": 4321, "chunks": ["Part one. ", "Part two."],
                                "chunkDelayMs": 60000}))
    strong, sid = open_session(driver, d, tmp_path, "dash-cut-off")
    submit(driver, "cut me off please")
    wait_for(lambda: texts(driver, "#timeline .msg.streaming .text") == ["Part one. "], "the first half", WAIT)
    d.restart()
    wait_for(lambda: body_data(driver, "conn") == "live", "the session watched again", 20)
    status, page = d.request("GET", f"/sessions/{sid}/events?limit=1000", token=strong)
    [cut] = [e for e in page["events"] if e["kind"] == "model.cut_off"]
    assert cut["body"]["usage"]["input_tokens"] == 4321, cut
    line = f"{cut['seq']} model.cut_off · Lens was stopped while the model answered · tokens 4321 in · asked again"

    def listed() -> bool:
        next_frame(driver)  # (the list is repainted once per animation frame)
        return line in texts(driver, "#activity li")
    wait_for(listed, "the cut-off request in the recent events")
    # (the request asked again streams on: its usage is recorded once it ends)
    wait_for(lambda: re.search(r"\b4,?321\b", " ".join(texts(driver, "#usage dd"))),
             "the usage counting the cut-off request", 20)
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []


def test_dashboard_shows_events_past_the_off_loop_frame_size_whole_and_as_text_live_and_after_a_restart(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Inputs whose events are past ``FRAME_OFF_LOOP_CHARS`` (their SSE frames made in a worker
    thread): one sent while the page watches, one while the daemon is away and the page waits to
    reconnect (its resume, from its Last-Event-ID, usually replays it). Each shows once, whole,
    its markup as text, its line breaks, quotes and letters past ASCII as sent."""
    from runtime.bus import FRAME_OFF_LOOP_CHARS

    started = time.monotonic()
    driver = browser
    config = with_turns(maxBodyBytes=8 * 1024 * 1024)
    config["context"] = {"compaction": {"auto": False}}  # (a few MB of input would pass the faux window's 80 %)
    d = make_daemon(config)
    strong, sid = open_session(driver, d, tmp_path, "dash-large-frames")
    piece = 'ß"\n\t€ '
    big = [XSS + piece * (FRAME_OFF_LOOP_CHARS // len(piece) + 1) + f"END {i}" for i in range(2)]

    def shown_whole(n: int) -> bool:
        return texts(driver, "#timeline .msg.user .text") == big[:n] and body_data(driver, "sessionStatus") == "idle"

    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "large-0", "content": big[0]}, token=strong)[0] == 202
    wait_for(lambda: shown_whole(1), "the first large input, whole", 20)

    # The daemon away: the page backs off (0.5 s, 1 s, 2 s, …); the input is sent as soon as the
    # daemon is back, while the page still waits.
    before = int(body_data(driver, "reconnects") or 0)
    d.stop()
    wait_for(lambda: int(body_data(driver, "reconnects") or 0) >= before + 3, "the page backing off", 20)
    d.start()
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "large-1", "content": big[1]}, token=strong)[0] == 202
    wait_for(lambda: body_data(driver, "conn") == "live", "the stream resumed", 20)
    wait_for(lambda: shown_whole(2), "the second large input, whole", 20)
    last = d.request("GET", f"/sessions/{sid}", token=strong)[1]["lastSeq"]
    wait_for(lambda: int(body_data(driver, "lastEventId") or 0) == last, "every event seen")
    assert body_data(driver, "duplicates") is None
    assert driver.execute_script("return window.injected ?? null") is None
    assert not by_css(driver, "#timeline img, #timeline script")
    assert not by_css(driver, "#errors li"), texts(driver, "#errors li")
    assert console_errors(driver) == []
    assert time.monotonic() - started < 45, "the test must stay bounded"
