"""An answer the provider cut (stop reason ``max_tokens``, ``content_filter`` or ``refusal``) says
so on the timeline, where it stopped: its last item (its last tool call, else its text) carries
the view's ``stopReason`` and shows a note; an answer that ended as usual shows none.

A real ``lens serve --port 0`` whose faux turns stop as a provider that cut them says, a real
executor, a log in a temporary directory, and headless Chromium, as in
``test_dashboard_browser.py`` (its fixtures and helpers). Every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, becomes, body_data, browser, by_css, committed_answers, console_errors, make_daemon, open_in_page, open_session,
    submit, texts, wait_for, with_turns)

TURNS = (
    {"when": "write too long", "text": "(faux) The beginning of a long", "stopReason": "max_tokens"},
    {"when": "read and be filtered", "text": "(faux) Reading it.",
     "toolCalls": [{"name": "read_file", "arguments": {"path": "a.txt"}}], "stopReason": "content_filter"},
    {"when": "so it was not run", "text": "(faux) I will call it again later."},
    {"when": "refuse this", "text": "(faux) I can", "stopReason": "refusal",
     "stopDetails": {"type": "refusal", "category": "cyber", "explanation": "This request was declined."}},
    {"when": "refuse that too", "text": "(faux) Well", "stopReason": "refusal"},
)
NOTE = ".stop-note"


def asked(driver: Any, text: str, answers: int) -> None:
    submit(driver, text)
    wait_for(lambda: len(committed_answers(driver)) == answers and body_data(driver, "sessionStatus") == "idle",
             f"the answer to {text!r}")


def notes(driver: Any) -> list[tuple[str, str]]:
    """(the item's kind and words, the note) of each item of the timeline with a stop note."""
    return driver.execute_script("""
      return Array.from(document.querySelectorAll('#timeline .stop-note'), n => {
        const item = n.closest('.msg, .tool');
        const what = item.classList.contains('tool') ? 'call ' + item.querySelector('.name').textContent
                                                     : item.querySelector('.text').textContent;
        return [what, n.textContent];
      });""")


def test_dashboard_says_where_the_provider_cut_an_answer(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    driver = browser
    d = make_daemon(with_turns(*TURNS))
    strong, sid = open_session(driver, d, tmp_path, "dash-cut")
    asked(driver, "write too long please", 1)
    asked(driver, "read and be filtered", 3)
    asked(driver, "refuse this", 4)
    asked(driver, "refuse that too", 5)
    expected = [
        ["(faux) The beginning of a long", "The answer was cut at the model's output limit."],
        ["call read_file", "The answer was stopped by the provider's content filter."],
        ["(faux) I can", "The answer was refused by the provider (category cyber): This request was declined."],
        ["(faux) Well", "The answer was refused by the provider."]]
    wait_for(lambda: notes(driver) == expected, "the notes of the three cut answers")
    # (each note shown: the timeline can still be drawn again by a view read the last events asked for)
    becomes(lambda: [n.is_displayed() for n in by_css(driver, f"#timeline {NOTE}")], [True] * len(expected), "the notes shown")
    # (the cut call was not run: its result says so; the answers that ended as usual have no note)
    assert "so it was not run" in " ".join(texts(driver, "#timeline .tool[data-call-id] details pre"))
    assert committed_answers(driver)[2] == "(faux) I will call it again later."

    status, view = d.request("GET", f"/sessions/{sid}", token=strong)
    assert status == 200, view
    said = [(it["role"], it.get("stopReason")) for it in view["items"] if it["role"] in ("assistant", "tool_call")]
    assert said == [("assistant", "max_tokens"), ("assistant", None), ("tool_call", "content_filter"),
                    ("assistant", None), ("assistant", "refusal"), ("assistant", "refusal")], said

    # (a page that opens the session later reads the same from the view)
    open_in_page(driver, d, strong, sid)
    wait_for(lambda: notes(driver) == expected, "the notes read from the view")
    assert console_errors(driver) == []


def test_dashboard_shows_an_answer_with_neither_text_nor_calls(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    # Such an answer (reasoning alone, or nothing before the content filter stopped it) left no
    # item: the timeline showed the input and nothing after it, as if the model had not answered.
    driver = browser
    d = make_daemon(with_turns({"when": "say nothing", "reasoning": "mulling it over"},
                               {"when": "filter it all", "stopReason": "content_filter"}))
    strong, sid = open_session(driver, d, tmp_path, "dash-empty")
    asked(driver, "say nothing", 1)
    asked(driver, "filter it all", 2)
    shown = [["assistant · empty", "(no text and no tool calls; stop reason end_turn)"],
             ["assistant · empty", "(no text and no tool calls; stop reason content_filter)"]]

    def empty_answers() -> list[list[str]]:
        return [[n.find_element("css selector", ".who").get_attribute("textContent"),
                 n.find_element("css selector", ".text").get_attribute("textContent")]
                for n in by_css(driver, "#timeline .msg.empty-answer")]

    wait_for(lambda: empty_answers() == shown, "the two empty answers")
    filtered = ["(no text and no tool calls; stop reason content_filter)",
                "The answer was stopped by the provider's content filter."]
    assert notes(driver) == [filtered]

    open_in_page(driver, d, strong, sid)  # (a page that opens the session later reads the same from the view)
    wait_for(lambda: empty_answers() == shown, "the empty answers read from the view")
    assert notes(driver) == [filtered]
    assert console_errors(driver) == []


def test_dashboard_says_where_a_responses_limit_on_messages_cut_an_answer(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    # A Responses ``incomplete`` response whose reason is ``max_messages`` is a cut as well: its
    # last call is not run, the view marks it, and the dashboard says why it stopped there.
    driver = browser
    d = make_daemon(with_turns(
        {"when": "read many", "text": "(faux) Reading both.",
         "toolCalls": [{"name": "read_file", "arguments": {"path": "a.txt"}},
                       {"name": "read_file", "arguments": {"path": "b.txt"}}],
         "stopReason": "max_messages"},
        {"when": "so it was not run", "text": "(faux) Calling it again later."}))
    strong, sid = open_session(driver, d, tmp_path, "dash-max-messages")
    asked(driver, "read many files", 2)
    expected = [["call read_file", "The answer was cut at the provider's limit on messages."]]
    wait_for(lambda: notes(driver) == expected, "the note of the answer cut at the limit on messages")
    # (each note shown: the timeline can still be drawn again by a view read the last events asked for)
    becomes(lambda: [n.is_displayed() for n in by_css(driver, f"#timeline {NOTE}")], [True] * len(expected), "the notes shown")

    status, view = d.request("GET", f"/sessions/{sid}", token=strong)
    assert status == 200, view
    said = [(it["role"], it.get("stopReason")) for it in view["items"] if it["role"] in ("assistant", "tool_call")]
    assert said == [("assistant", None), ("tool_call", None), ("tool_call", "max_messages"),
                    ("assistant", None)], said

    open_in_page(driver, d, strong, sid)  # (a page that opens the session later reads the same from the view)
    wait_for(lambda: notes(driver) == expected, "the note read from the view")
    assert console_errors(driver) == []
