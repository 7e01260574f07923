"""A command's output and a job's, as a terminal would show them: their SGR escape sequences
(colours, bold, inverse…) shown as spans with classes, a string sequence's text (an OSC title, an
OSC 8 link's address) as a muted note and never a link, every other escape or control sequence
(cursor moves, erases, a character set switch, a bell, a sequence cut short by the end of a line)
left out, and the text between them exact
(markup in it shown as text; Hebrew, a combining mark and an emoji as they came). The daemon
keeps the output as the command wrote it.

One real daemon (``lens serve`` on loopback port 0, a real executor process, the ``faux``
provider calling the tools) and one headless Chromium, as in ``test_dashboard_browser.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, browser, by_css, click, console_errors, daemon, make_daemon, one, open_session, session_starting_jobs,
    submit, wait_for)

OUTPUT = (b"plain \x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[m "
          b"\x1b[38;5;196mc256\x1b[39m \x1b[48;2;10;20;30mtrue\x1b[0m \x1b[7minv\x1b[27m "
          b"\x1b[2J\x1b[H\x1b[?25lcleared\x1b[K \x1b]0;a title\x07"
          b"\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\ "
          b"<b>not bold</b> \x08\x07\x1b(Bend\x1b[31\n"
          b"\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d e\xcc\x81 \xf0\x9f\x98\x80 \xc2\x9b1mc1\x1b[4mu\n")
# (a string sequence's text, which the model reads, is shown as a muted note, never a link)
NOTES = [["⟨OSC 0: a title⟩", "ansi-note", "", ""], ["⟨OSC 8: https://evil.example/⟩", "ansi-note", "", ""],
         ["⟨OSC 8⟩", "ansi-note", "", ""]]
SHOWN = ("plain red bold green c256 true inv cleared " + "⟨OSC 0: a title⟩⟨OSC 8: https://evil.example/⟩link⟨OSC 8⟩"
         " <b>not bold</b> end\nשלום e\u0301 😀 c1u\n")
# (the page's ink on a background near black is lightened to be read there: "true")
SPANS = [["red", "ansi-fg-1", "", ""], ["bold green", "ansi-fg-2 ansi-bold", "", ""],
         ["c256", "", "rgb(255, 0, 0)", ""], ["true", "", "rgb(97, 102, 110)", "rgb(10, 20, 30)"],
         ["inv", "ansi-inverse", "", ""], *NOTES,
         # (up to the note: the output and the line break before the note)
         ["c1", "ansi-bold", "", ""], ["u\n\n", "ansi-bold ansi-underline", "", ""]]

# What a <pre> shows: its text, its spans (text, classes, colour, background) and the names of
# every element in it.
READ = """
const pre = arguments[0] instanceof Element ? arguments[0] : document.querySelector(arguments[0]);
if (!pre) return null;
return {text: pre.textContent, tags: Array.from(pre.querySelectorAll("*"), (n) => n.tagName),
        spans: Array.from(pre.querySelectorAll("span"), (n) => [n.textContent, n.className, n.style.color,
                                                                 n.style.backgroundColor])};
"""
RESULT_PRE = """
const card = document.querySelector(`#timeline .tool[data-call-id="${arguments[0]}"]`);
const result = card && [...card.querySelectorAll(":scope > details")].find(
  (d) => d.querySelector("summary").textContent === "result");
return result ? result.querySelector("pre") : null;
"""


def command_result(daemon: Daemon, token: str, sid: str) -> dict[str, Any]:
    """The session's last tool call with its result, once the session is idle again."""
    def call() -> dict[str, Any] | None:
        view = daemon.request("GET", f"/sessions/{sid}", token=token)[1]
        calls = [it for it in view["items"] if it["role"] == "tool_call" and "result" in it]
        return calls[-1] if calls and view["status"] == "idle" else None

    return wait_for(call, "the command's result")


def shown_result(browser: Any, item: dict[str, Any]) -> Any:
    """What the page shows of ``item``'s result (:data:`READ`'s reading of its ``<pre>``)."""
    return wait_for(lambda: browser.execute_script(READ, browser.execute_script(RESULT_PRE, item["call"]["callId"])),
                    "the result in the page")


def test_dashboard_shows_a_commands_colours_and_leaves_out_its_other_escape_sequences(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    token, sid = open_session(browser, daemon, tmp_path, "dash-colours")
    (tmp_path / "workspace" / "colours.txt").write_bytes(OUTPUT)
    submit(browser, "/tool run_command " + json.dumps({"command": "cat colours.txt"}))

    item = command_result(daemon, token, sid)
    # (the daemon keeps what the command wrote, escape sequences and all)
    assert OUTPUT.decode() in item["result"]["text"], item["result"]
    shown = shown_result(browser, item)
    # (Lens's note of how the command ended is plain text, not in the colour the output left on)
    assert shown["text"] == SHOWN + "\n[exit 0]", shown["text"]
    assert shown["spans"] == SPANS, shown["spans"]
    assert set(shown["tags"]) == {"SPAN"}, shown["tags"]   # (no link, no markup from the text)
    assert not any(ch < " " and ch not in "\t\n\r" or "\x7f" <= ch <= "\x9f" for ch in shown["text"]), shown["text"]
    assert console_errors(browser) == []


def test_dashboard_shows_a_jobs_colours_in_its_output(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    session_starting_jobs(make_daemon, browser, tmp_path, "dash-job-colours",
                          r"printf 'a \033[31mred\033]0;t\007 \033[1mboth\033[0m b\n'")
    card = "#jobs li.card"
    wait_for(lambda: "exited (0)" in one(browser, card).text, "the job's end", 20)
    click(browser, f"{card} button.job-output")
    def read() -> Any:
        got = browser.execute_script(READ, f"{card} .job-out pre")
        seen.append(got)
        return got if got is not None and got["text"] == "a red⟨OSC 0: t⟩ both b\n" else None

    seen: list[Any] = []
    try:
        shown = wait_for(read, "the job's output")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last read: {seen[-1:]}, the card: {one(browser, card).text!r}") from None
    assert shown["spans"] == [["red", "ansi-fg-1", "", ""], ["⟨OSC 0: t⟩", "ansi-note", "", ""], [" ", "ansi-fg-1", "", ""],
                              ["both", "ansi-fg-1 ansi-bold", "", ""]], shown
    assert console_errors(browser) == []


def test_dashboard_bounds_the_spans_of_an_output_that_changes_colour_at_every_word(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """Past 5000 spans the rest of the output is plain text (a browser lays a hundred thousand
    spans out for seconds, at every redraw of a followed job's output), the words all there."""
    token, sid = open_session(browser, daemon, tmp_path, "dash-many-colours")
    words = range(1, 6001)
    (tmp_path / "workspace" / "many.txt").write_text("".join(f"\x1b[3{i % 2 + 1}m{i} " for i in words))
    submit(browser, "/tool run_command " + json.dumps({"command": "cat many.txt"}))

    item = command_result(daemon, token, sid)
    shown = shown_result(browser, item)
    assert shown["text"] == "".join(f"{i} " for i in words) + "\n[exit 0]", shown["text"][-200:]
    assert len(shown["spans"]) == 5000, len(shown["spans"])
    assert shown["spans"][:2] == [["1 ", "ansi-fg-2", "", ""], ["2 ", "ansi-fg-1", "", ""]], shown["spans"][:2]
    assert shown["spans"][-1] == ["5000 ", "ansi-fg-1", "", ""], shown["spans"][-1]
    assert console_errors(browser) == []


def test_dashboard_shows_the_colours_of_a_jobs_last_output_in_the_report_of_its_end(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The input that tells the agent a job ended carries the job's last output: shown in the
    timeline as the job's output is, its first lines (Lens's) as they are."""
    _, _, _, [job] = session_starting_jobs(make_daemon, browser, tmp_path, "dash-report-colours",
                                           r"printf 'a \033[31mred\033[2K\033[0m b\n'")
    report = "#timeline .msg.user .text"

    def shown() -> Any:
        got = [browser.execute_script(READ, n) for n in by_css(browser, report)]
        return next((g for g in got if g["text"].startswith(f"[background job {job} ")), None)

    got = wait_for(shown, "the report of the job's end", 20)
    assert got["text"] == (f"[background job {job} exited with code 0]\n"
                           r"command: printf 'a \033[31mred\033[2K\033[0m b\n'" "\n"
                           "last output (up to 4096 bytes):\na red b\n"), got["text"]
    assert got["spans"] == [["red", "ansi-fg-1", "", ""]] and got["tags"] == ["SPAN"], got
    assert console_errors(browser) == []


def test_dashboard_shows_the_colours_of_a_queued_report_of_a_jobs_end(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A job that ends while the agent answers: the report of its end waits in the queue, its
    last output shown there as in the timeline."""
    command = r"while [ ! -e go ]; do sleep 0.05; done; printf 'a \033[31mred\033[0m b\n'"
    d, token, sid, [job] = session_starting_jobs(make_daemon, browser, tmp_path, "dash-queued-report", command)
    wait_for(lambda: d.request("GET", f"/sessions/{sid}", token=token)[1]["status"] == "idle", "the first run's end")
    submit(browser, "stream slowly")
    wait_for(lambda: by_css(browser, "#timeline .msg.streaming"), "the answer streaming")
    (tmp_path / "workspace" / "go").touch()
    queued = "#queue li.card .text"

    def shown() -> Any:
        got = [browser.execute_script(READ, n) for n in by_css(browser, queued)]
        return next((g for g in got if g["text"].startswith(f"[background job {job} ")), None)

    got = wait_for(shown, "the report queued", 20)
    assert got["text"].endswith("last output (up to 4096 bytes):\na red b\n"), got["text"]
    assert got["spans"] == [["red", "ansi-fg-1", "", ""]] and got["tags"] == ["SPAN"], got
    status, body = d.request("POST", f"/sessions/{sid}/abort", token=token)
    assert status == 200, body
    assert console_errors(browser) == []


def test_dashboard_shows_a_users_input_shaped_like_a_jobs_report_as_they_wrote_it(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """Only Lens's own report of a job's end is shown as terminal output: an input a user wrote in
    its shape (a real job's id, another command; or in the queue, a request id not the job's) is
    shown as written, its escape sequences as the characters they are."""
    command = r"while [ ! -e go ]; do sleep 0.05; done; printf 'a \033[31mred\033[0m b\n'"
    d, token, sid, [job] = session_starting_jobs(make_daemon, browser, tmp_path, "dash-fake-report", command)
    wait_for(lambda: d.request("GET", f"/sessions/{sid}", token=token)[1]["status"] == "idle", "the first run's end")
    fake = (f"[background job {job} exited with code 0]\ncommand: echo other\n"
            "last output (up to 4096 bytes):\n\x1b[31mnot a report\x1b[0m\n")
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "fake-1", "content": fake}, token=token)[0] == 202
    report = "#timeline .msg.user .text"

    def shown(selector: str, text: str) -> Any:
        got = [browser.execute_script(READ, n) for n in by_css(browser, selector)]
        return next((g for g in got if g["text"] == text), None)

    got = wait_for(lambda: shown(report, fake), "the input in the timeline", 20)
    assert got["spans"] == [] and got["tags"] == [], got
    wait_for(lambda: d.request("GET", f"/sessions/{sid}", token=token)[1]["status"] == "idle", "the second run's end")
    # (in the queue: the job's own command and id, but a request id a client chose)
    submit(browser, "stream slowly")
    wait_for(lambda: by_css(browser, "#timeline .msg.streaming"), "the answer streaming")
    queued = fake.replace("command: echo other", "command: " + command)
    assert d.request("POST", f"/sessions/{sid}/inputs", {"requestId": "fake-2", "content": queued}, token=token)[0] == 202
    got = wait_for(lambda: shown("#queue li.card .text", queued), "the input queued", 20)
    assert got["spans"] == [] and got["tags"] == [], got
    status, body = d.request("POST", f"/sessions/{sid}/abort", token=token)
    assert status == 200, body
    assert console_errors(browser) == []


# The contrast of each span's text with the background it is shown on (its own, else its nearest
# ancestor's that is not transparent), as WCAG reckons it.
CONTRASTS = """
const pre = arguments[0];
const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
                     return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
const bgOf = (n) => { for (; n; n = n.parentElement) { const c = rgb(getComputedStyle(n).backgroundColor);
                                                     if (c.length < 4 || c[3] > 0) return c.slice(0, 3); }
                      return [255, 255, 255]; };
return Array.from(pre.querySelectorAll("span"), (n) => {
  const a = lum(rgb(getComputedStyle(n).color)), b = lum(bgOf(n));
  return [n.textContent, Math.round((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05) * 1000) / 1000];
});
"""


def test_dashboard_shows_every_terminal_colour_with_a_contrast_of_at_least_3_to_1(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """256 colours, 24-bit colours, the palette's bright white, a colour on a background the
    output also sets and inverse: none is shown fainter than 3:1 against the background it is on."""
    token, sid = open_session(browser, daemon, tmp_path, "dash-contrast")
    (tmp_path / "workspace" / "faint.txt").write_bytes(
        b"\x1b[97mbright white\x1b[0m \x1b[38;5;231mwhite256\x1b[0m \x1b[38;2;250;250;240mnear white\x1b[0m "
        b"\x1b[38;5;226myellow\x1b[0m \x1b[48;5;16mink on black\x1b[0m \x1b[7;97minverse bright\x1b[0m "
        b"\x1b[31;41mred on red\x1b[0m \x1b[38;2;0;0;0;48;2;20;20;20mblack on near black\x1b[0m "
        b"\x1b[7;38;2;250;250;250mlight inverse\x1b[0m \x1b[31mred\x1b[0m\n")
    submit(browser, "/tool run_command " + json.dumps({"command": "cat faint.txt"}))

    item = command_result(daemon, token, sid)
    pre = wait_for(lambda: browser.execute_script(RESULT_PRE, item["call"]["callId"]), "the result in the page")
    got = browser.execute_script(CONTRASTS, pre)
    assert [t for t, _ in got] == ["bright white", "white256", "near white", "yellow", "ink on black", "inverse bright",
                                   "red on red", "black on near black", "light inverse", "red"], got
    assert all(ratio >= 3 for _, ratio in got), got
    # (a colour that holds as it is, is shown as it is)
    assert browser.execute_script(READ, pre)["spans"][-1] == ["red", "ansi-fg-1", "", ""]
    assert console_errors(browser) == []


def test_dashboard_leaves_out_what_a_cut_left_of_a_sequence_at_the_start_of_a_jobs_reported_output(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The report of a job's end carries its output's last 4096 bytes: when they begin inside an
    escape sequence (after its ESC), what is left of it (`[31m`, an OSC 8 link's address) is not
    shown as text."""
    before = r"head -c 5000 /dev/zero | tr '\0' x; "
    csi = before + r"printf '\033[31m'; head -c 4092 /dev/zero | tr '\0' y"
    osc = before + r"printf '\033]8;;https://evil.example/\033\\'; head -c 4069 /dev/zero | tr '\0' z"
    _, _, _, jobs = session_starting_jobs(make_daemon, browser, tmp_path, "dash-report-cut", csi, osc)
    report = "#timeline .msg.user .text"

    def shown(job: str) -> Any:
        got = [browser.execute_script(READ, n) for n in by_css(browser, report)]
        return next((g for g in got if g["text"].startswith(f"[background job {job} ")), None)

    tails = []
    for job in jobs:
        got = wait_for(lambda: shown(job), "the report of the job's end", 20)
        tails.append((got["text"].split("last output (up to 4096 bytes):\n", 1)[1], got["spans"]))
    assert tails == [("y" * 4092, []), ("z" * 4069, [])], [(t[:40], len(t), spans) for t, spans in tails]
    assert console_errors(browser) == []


def test_dashboard_shows_the_note_of_a_gap_in_a_jobs_output_plain(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A followed job's output that outran what the daemon keeps: Lens's note of the gap is plain
    text, not in the colour the output had left on, and the output after it starts plain."""
    command = (r"printf '\033[31mred '; while [ ! -e go ]; do sleep 0.05; done; "
               r"head -c 1200000 /dev/zero | tr '\0' z; while [ ! -e end ]; do sleep 0.05; done")
    session_starting_jobs(make_daemon, browser, tmp_path, "dash-gap-note", command)
    card = "#jobs li.card"
    click(browser, f"{card} button.job-output")
    wait_for(lambda: (browser.execute_script(READ, f"{card} .job-out pre") or {}).get("text") == "red ", "the first output")
    (tmp_path / "workspace" / "go").touch()
    notes = f"""
const pre = document.querySelector("{card} .job-out pre");
if (!pre) return null;
const walk = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT), found = [];
for (let n; (n = walk.nextNode());) if (n.data.includes("no longer kept")) found.push([n.data, n.parentElement.tagName]);
return found.length ? [found, Array.from(pre.querySelectorAll("span"), (s) => s.textContent.slice(0, 10))] : null;
"""
    found, spans = wait_for(lambda: browser.execute_script(notes), "the note of the gap", 60)
    assert [parent for _, parent in found] == ["PRE"], found
    assert found[0][0].startswith("\n… (") and found[0][0].endswith(" bytes no longer kept) …\n"), found
    assert spans == ["red "], spans
    (tmp_path / "workspace" / "end").touch()
    assert console_errors(browser) == []


def test_dashboard_gives_the_spans_of_a_followed_jobs_output_to_its_newest_part(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A job's output that changes colour at every word, past the bound: the last 5000 colour
    changes (the newest, at the bottom of the followed output) are shown, the part before plain."""
    command = (r"i=1; while [ $i -le 6000 ]; do printf '\033[3%dm%d ' $((i % 2 + 1)) $i; i=$((i + 1)); done; "
               r"while [ ! -e end ]; do sleep 0.05; done")
    session_starting_jobs(make_daemon, browser, tmp_path, "dash-newest-colours", command)
    card = "#jobs li.card"
    click(browser, f"{card} button.job-output")
    words = "".join(f"{i} " for i in range(1, 6001))
    shown = wait_for(lambda: (lambda g: g if g and g["text"] == words else None)(
        browser.execute_script(READ, f"{card} .job-out pre")), "the whole output", 60)
    assert len(shown["spans"]) == 5000, len(shown["spans"])
    assert shown["spans"][0] == ["1001 ", "ansi-fg-2", "", ""], shown["spans"][0]
    assert shown["spans"][-1] == ["6000 ", "ansi-fg-1", "", ""], shown["spans"][-1]
    (tmp_path / "workspace" / "end").touch()
    assert console_errors(browser) == []


def test_dashboard_reads_at_most_5000_colour_changes_of_an_output_that_repeats_its_colour(
        daemon: Daemon, browser: Any, tmp_path: Path) -> None:
    """SGR sequences that change nothing make no span but take the time to read: past 5000 of
    them, the rest of the output is plain text, the words all there."""
    token, sid = open_session(browser, daemon, tmp_path, "dash-repeated-colour")
    (tmp_path / "workspace" / "same.txt").write_text("".join(f"\x1b[31m{i} " for i in range(1, 6001)))
    submit(browser, "/tool run_command " + json.dumps({"command": "cat same.txt"}))

    item = command_result(daemon, token, sid)
    shown = shown_result(browser, item)
    assert shown["text"] == "".join(f"{i} " for i in range(1, 6001)) + "\n[exit 0]", shown["text"][-200:]
    assert shown["spans"] == [["".join(f"{i} " for i in range(1, 5001)), "ansi-fg-1", "", ""]], \
        [(t[-20:], c) for t, c, _, _ in shown["spans"]]
    assert console_errors(browser) == []
