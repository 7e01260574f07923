"""The dashboard when its live stream is behind the view it read (F-API-6, F-API-5).

The page draws a session from a view read (``GET /sessions/{id}``, at the view's ``lastSeq``) and
keeps it live from the SSE stream. The two are read apart: a view read can already hold an answer
committed at a seq the stream has not delivered yet, while the stream still delivers that
answer's deltas. The page must then never draw the answer a second time as a streaming bubble: a
delta (or partial) the stream delivers before it has reached the view's position is of an answer
the view already says all it can of, and a committed answer the view holds replaces the bubble
of its streamed text.

A subagent's conversation is a read of its own (``GET /sessions/{id}?agentId=``, at its own
``lastSeq``), and its subagent's bubble is drawn at its end: the same holds for it and its read.

A real ``lens serve --port 0`` (a faux model whose answer streams in three deltas, and a
subagent's that streams half an answer, then waits a minute), a log in a temporary directory, and
headless Chromium, as in ``test_dashboard_browser.py`` (its fixtures and helpers). The page's own
fetch is wrapped (as the other tests' ``hold_requests`` do) so that the test decides when its view
reads go out and which of its stream's frames reach the page; every wait is for a condition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, body_data, browser, by_css, click, committed_answers, connect, console_errors, make_daemon, next_frame, submit,
    texts, wait_for, with_turns)
from tests.dashboard.conftest import project_and_session
from tests.dashboard.test_dashboard_keyboard import CAUGHT_UP
from tests.dashboard.test_dashboard_subagent import CONVO, FIRST_HALF

CHUNKS = ["(faux) The view holds ", "this answer ", "before its deltas."]
ANSWER = "".join(CHUNKS)
LAGGING = {"when": "lag behind", "chunks": CHUNKS}

# The page's fetch wrapped: view reads (GET /sessions/{id}?…) wait while `holdViews()` holds them
# (`holdViews(true)`: the session's view alone, a subagent's conversation (…&agentId=) read as it
# asks), until `releaseViews()`; the stream's frames are cut out of its bytes and reach the page as
# `holdStream(mode)` says: null every frame, "all" none, a kind every frame before the first of
# that kind. Comments (heartbeats) always pass, so the page never takes the stream for dead.
# `window.streamSeen`: [kind, id] of each event frame the daemon sent, held or not.
HOLD_STREAM_AND_VIEWS = """
window.streamSeen = []; window.viewsHeld = 0;
let hold = null, sink = null, gate = null;
const held = [], enc = new TextEncoder(), real = window.fetch;
const kindOf = (frame) => { const m = /^event: (.*)$/m.exec(frame); return m ? m[1] : null; };
const pump = () => {
  while (sink && held.length && hold !== 'all' && kindOf(held[0]) !== hold) sink.enqueue(enc.encode(held.shift()));
};
window.holdStream = (mode) => { hold = mode; pump(); };
window.holdViews = (viewOnly) => {
  if (!gate) { let open; gate = {wait: new Promise((r) => { open = r; }), open, viewOnly: !!viewOnly}; }
};
window.releaseViews = () => { if (gate) { gate.open(); gate = null; } };
window.fetch = async (...args) => {
  const url = String(args[0]);
  if (gate && /\\/sessions\\/[^/?]+\\?/.test(url) && !(gate.viewOnly && /[?&]agentId=/.test(url))) {
    window.viewsHeld++; await gate.wait;
  }
  const resp = await real(...args);
  if (!url.includes('/events/stream') || !resp.ok) return resp;
  const reader = resp.body.getReader(), dec = new TextDecoder();
  let text = '';
  const body = new ReadableStream({
    start(ctrl) {
      sink = ctrl;
      (async () => {
        try {
          for (;;) {
            const {done, value} = await reader.read();
            if (done) { ctrl.close(); return; }
            text += dec.decode(value, {stream: true});
            for (let at; (at = text.indexOf('\\n\\n')) >= 0; ) {
              const frame = text.slice(0, at + 2), kind = kindOf(frame);
              text = text.slice(at + 2);
              if (kind === null) { ctrl.enqueue(enc.encode(frame)); continue; }
              const id = /^id: (\\d+)$/m.exec(frame);
              window.streamSeen.push([kind, id ? Number(id[1]) : null]);
              held.push(frame);
            }
            pump();
          }
        } catch (err) { try { ctrl.error(err); } catch (_) {} }
      })();
    },
    cancel() { return reader.cancel(); },
  });
  return new Response(body, {status: resp.status, statusText: resp.statusText, headers: resp.headers});
};
"""

STREAMING = "#timeline .msg.streaming .text"


def open_held(driver: Any, d: Daemon, client: str, tmp_path: Path) -> tuple[str, str]:
    """A session made over the API and opened in a page whose fetch is HOLD_STREAM_AND_VIEWS's,
    its stream live: (a strong credential, the session's id)."""
    token = d.pair(client, strong=True)
    _, session = project_and_session(d, token, tmp_path / "workspace", "Behind")
    driver.get(d.base + "/")
    driver.execute_script(HOLD_STREAM_AND_VIEWS)
    connect(driver, token)
    wait_for(lambda: body_data(driver, "trust") == "strong", "strong trust")
    click(driver, "#projects button")
    click(driver, f"#sessions button[data-session-id='{session['id']}']")
    wait_for(lambda: body_data(driver, "conn") == "live", "the live stream")
    return token, session["id"]


def all_sent(driver: Any, d: Daemon, token: str, sid: str) -> bool:
    """Whether the run has ended with the answer committed and every event of it has reached the
    page's fetch (held or not)."""
    view = d.request("GET", f"/sessions/{sid}", token=token)[1]
    if view["status"] != "idle" or ANSWER not in [it.get("text") for it in view["items"]]:
        return False
    return max((i for _, i in driver.execute_script("return window.streamSeen") if i is not None), default=0) == view["lastSeq"]


def caught_up_with_one_answer(driver: Any) -> None:
    driver.execute_script("window.holdStream(null)")
    wait_for(lambda: driver.execute_script(CAUGHT_UP), "the stream caught up with the view")
    assert committed_answers(driver) == [ANSWER]
    assert texts(driver, STREAMING) == []
    assert body_data(driver, "duplicates") is None
    assert console_errors(driver) == []


def test_dashboard_draws_no_bubble_for_the_deltas_of_an_answer_its_view_holds(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The view read after the answer was committed arrives first; the stream's deltas of that
    answer come after it: they drew the answer again, as streaming, under the committed one."""
    driver = browser
    d = make_daemon(with_turns(LAGGING))
    token, sid = open_held(driver, d, "dash-behind-deltas", tmp_path)
    driver.execute_script("window.holdStream('all'); window.holdViews()")
    submit(driver, "lag behind")
    wait_for(lambda: all_sent(driver, d, token, sid), "the answer committed and sent")
    assert driver.execute_script("return window.viewsHeld") >= 1   # (the read after the send waited)
    driver.execute_script("window.releaseViews()")
    wait_for(lambda: committed_answers(driver) == [ANSWER], "the view's committed answer")
    seen = [k for k, _ in driver.execute_script("return window.streamSeen")]
    assert seen.count("model.delta") == len(CHUNKS), seen

    # The stream up to its model.responded: every delta of the answer the view shows.
    driver.execute_script("window.holdStream('model.responded')")
    wait_for(lambda: body_data(driver, "deltas") == str(len(CHUNKS)), "the deltas handled by the page")
    next_frame(driver)   # (the bubbles are drawn at the next animation frame)
    assert texts(driver, STREAMING) == [], "the committed answer drawn again as streaming"
    assert committed_answers(driver) == [ANSWER]
    caught_up_with_one_answer(driver)


def test_dashboard_replaces_a_streaming_bubble_by_the_answer_its_view_holds(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The deltas arrive first and are drawn as streaming; the view read that holds the committed
    answer arrives before the stream's model.responded: the bubble stayed beside the answer."""
    driver = browser
    d = make_daemon(with_turns(LAGGING))
    token, sid = open_held(driver, d, "dash-behind-bubble", tmp_path)
    driver.execute_script("window.holdStream('model.responded'); window.holdViews()")
    submit(driver, "lag behind")
    wait_for(lambda: texts(driver, STREAMING) == [ANSWER], "the answer streaming")
    wait_for(lambda: all_sent(driver, d, token, sid), "the answer committed and sent")
    assert committed_answers(driver) == []

    driver.execute_script("window.releaseViews()")
    wait_for(lambda: committed_answers(driver) == [ANSWER], "the view's committed answer")
    next_frame(driver)
    assert texts(driver, STREAMING) == [], "the streaming bubble stayed beside the committed answer"
    caught_up_with_one_answer(driver)


def test_dashboard_draws_an_answer_still_streaming_once_its_stream_reaches_the_view(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The other side of the rule: a view read ahead of the stream whose answer is still open (an
    input queued behind it is the view's last event) does not lose the bubble: the deltas that
    came while the stream was behind are drawn once it reaches the view."""
    driver = browser
    d = make_daemon(with_turns(LAGGING))
    token, sid = open_held(driver, d, "dash-behind-open", tmp_path)
    driver.execute_script("window.holdStream('all'); window.holdViews()")
    submit(driver, "stream slowly")   # (its first half streams, the rest a minute later)
    seen = lambda: [k for k, _ in driver.execute_script("return window.streamSeen")]  # noqa: E731
    wait_for(lambda: "model.delta" in seen(), "the first half streamed")
    status, queued = d.request("POST", f"/sessions/{sid}/inputs",
                               {"requestId": "behind-1", "content": "next", "whenBusy": "followUp"}, token=token)
    assert status == 202, queued
    wait_for(lambda: seen().count("input.submitted") == 2, "the queued input sent")
    driver.execute_script("window.releaseViews()")
    wait_for(lambda: driver.execute_script("return document.getElementById('session-meta').textContent")
             .endswith(f"seq {queued['seq']}"), "the view read at the queued input")

    # The stream up to the queued input: the delta comes while the stream is behind the view.
    driver.execute_script("window.holdStream('model.delta')")
    driver.execute_script("window.holdStream('input.submitted')")
    wait_for(lambda: body_data(driver, "deltas") == "1", "the delta handled by the page")
    next_frame(driver)
    assert texts(driver, STREAMING) == []
    # (the view reads held again: the redraw as the stream reaches the view is the only one that
    # can draw the bubble, not a refresh its frames ask for)
    driver.execute_script("window.holdViews(); window.holdStream(null)")
    wait_for(lambda: body_data(driver, "lastEventId") == str(queued["seq"]), "the stream at the view")
    next_frame(driver)
    assert texts(driver, STREAMING) == FIRST_HALF
    assert committed_answers(driver) == []
    assert console_errors(driver) == []


PANE_STREAMING = CONVO + " .sub-items > .msg.streaming .text"
PANE_ANSWERS = CONVO + " .sub-items > .msg.assistant:not(.streaming) .text"
VIEW_SEQ = "return (/seq (\\d+)$/.exec(document.getElementById('session-meta').textContent) || [])[1] || null"


def subagent_streaming(driver: Any, d: Daemon, client: str, tmp_path: Path) -> tuple[str, str]:
    """A subagent started in a page whose stream is held at its answer's first delta (the first
    half; the rest would come a minute later), the view read at the stream's position:
    (a strong credential, the session's id)."""
    token, sid = open_held(driver, d, client, tmp_path)
    driver.execute_script("window.holdStream('model.delta')")
    # (escaped in the call's arguments: the subagent's prompt matches "stream slowly", the main
    # agent's message does not)
    submit(driver, '/tool subagent {"prompt": "stre\\u0061m slowly please"}')
    seen = lambda: driver.execute_script("return window.streamSeen")  # noqa: E731
    wait_for(lambda: "model.delta" in [k for k, _ in seen()] and by_css(driver, CONVO), "the subagent's first half sent")
    last = d.request("GET", f"/sessions/{sid}", token=token)[1]["lastSeq"]
    assert max(i for _, i in seen() if i is not None) == last   # (the daemon waits before the rest)
    wait_for(lambda: body_data(driver, "lastEventId") == str(last) and driver.execute_script(VIEW_SEQ) == str(last),
             "the view read at the stream's position")
    return token, sid


def aborted_and_sent(driver: Any, d: Daemon, token: str, sid: str) -> bool:
    """Whether the run has ended with the subagent's first half kept as its answer and every event
    of it has reached the page's fetch (held or not)."""
    view = d.request("GET", f"/sessions/{sid}", token=token)[1]
    subs = [a["agentId"] for a in view["agents"] if a["agentId"] != "main"]
    if view["status"] != "idle" or not subs:
        return False
    items = d.request("GET", f"/sessions/{sid}?agentId={subs[0]}", token=token)[1]["items"]
    if FIRST_HALF[0] not in [it.get("text") for it in items if it["role"] == "assistant"]:
        return False
    return max((i for _, i in driver.execute_script("return window.streamSeen") if i is not None), default=0) == view["lastSeq"]


def caught_up_with_the_kept_answer(driver: Any) -> None:
    driver.execute_script("window.releaseViews(); window.holdStream(null)")
    wait_for(lambda: driver.execute_script(CAUGHT_UP), "the stream caught up with the view")
    assert texts(driver, PANE_ANSWERS) == FIRST_HALF
    assert texts(driver, STREAMING) == []
    assert body_data(driver, "duplicates") is None
    assert console_errors(driver) == []


def test_dashboard_draws_no_bubble_in_a_conversation_for_the_deltas_of_an_answer_its_read_holds(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """A subagent's conversation is read apart from the view: opened after its answer was
    committed (the first half, kept by an abort), it holds that answer while the stream, not
    behind the view, still delivers its delta: drawn as streaming under the committed answer."""
    driver = browser
    d = make_daemon(with_turns())
    token, sid = subagent_streaming(driver, d, "dash-behind-convo", tmp_path)
    view_seq = driver.execute_script(VIEW_SEQ)
    driver.execute_script("window.holdViews(true)")   # (the view stays where the stream is)
    click(driver, "#abort")
    wait_for(lambda: aborted_and_sent(driver, d, token, sid), "the first half kept and sent")
    click(driver, CONVO + " > summary")
    wait_for(lambda: texts(driver, PANE_ANSWERS) == FIRST_HALF, "the conversation's read, the answer kept")

    # The stream up to the frame after the delta: the delta of the answer the conversation shows.
    kinds = [k for k, _ in driver.execute_script("return window.streamSeen")]
    driver.execute_script("window.holdStream(arguments[0])", kinds[kinds.index("model.delta") + 1])
    wait_for(lambda: body_data(driver, "deltas") == "1", "the delta handled by the page")
    next_frame(driver)
    assert driver.execute_script(VIEW_SEQ) == body_data(driver, "lastEventId") == view_seq   # (not behind the view)
    assert texts(driver, STREAMING) == [], "the kept answer drawn again as streaming in its conversation"
    assert texts(driver, PANE_ANSWERS) == FIRST_HALF
    caught_up_with_the_kept_answer(driver)


def test_dashboard_replaces_a_streaming_bubble_in_a_conversation_by_the_answer_its_read_holds(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The delta is drawn in the open conversation; the conversation read again (closed and
    opened) holds the answer committed (kept by an abort) before the stream's event that closes
    its request: the bubble stayed beside the answer in the conversation."""
    driver = browser
    d = make_daemon(with_turns())
    token, sid = subagent_streaming(driver, d, "dash-behind-convo-bubble", tmp_path)
    click(driver, CONVO + " > summary")
    wait_for(lambda: by_css(driver, CONVO + " .sub-items > .msg.user"), "the conversation's read")
    driver.execute_script("window.holdStream(null)")   # (the delta: nothing follows it before the abort)
    wait_for(lambda: texts(driver, PANE_STREAMING) == FIRST_HALF, "the first half streaming in the conversation")
    driver.execute_script("window.holdStream('all'); window.holdViews(true)")
    click(driver, "#abort")
    wait_for(lambda: aborted_and_sent(driver, d, token, sid), "the first half kept and sent")
    assert texts(driver, PANE_ANSWERS) == []

    click(driver, CONVO + " > summary")   # (closed, and opened: read again)
    click(driver, CONVO + " > summary")
    wait_for(lambda: texts(driver, PANE_ANSWERS) == FIRST_HALF, "the conversation read again, the answer kept")
    next_frame(driver)
    assert texts(driver, STREAMING) == [], "the streaming bubble stayed beside the kept answer"
    caught_up_with_the_kept_answer(driver)


def test_dashboard_draws_a_subagents_answer_still_streaming_once_its_stream_reaches_the_conversations_read(
        make_daemon: Callable[[dict[str, Any]], Daemon], browser: Any, tmp_path: Path) -> None:
    """The other side of the rule, in a conversation: read ahead of the stream while the subagent's
    answer is still open (an input queued behind it is the session's last event), it does not lose
    the bubble: the delta that came while the stream was behind the read is drawn there once the
    stream reaches it."""
    driver = browser
    d = make_daemon(with_turns())
    token, sid = subagent_streaming(driver, d, "dash-behind-convo-open", tmp_path)
    driver.execute_script("window.holdStream('all'); window.holdViews(true)")
    status, queued = d.request("POST", f"/sessions/{sid}/inputs",
                               {"requestId": "behind-convo-1", "content": "next", "whenBusy": "followUp"}, token=token)
    assert status == 202, queued
    seen = lambda: [k for k, _ in driver.execute_script("return window.streamSeen")]  # noqa: E731
    wait_for(lambda: seen().count("input.submitted") == 2, "the queued input sent")
    click(driver, CONVO + " > summary")   # (read at the queued input, the answer still open)
    wait_for(lambda: by_css(driver, CONVO + " .sub-items > .msg.user"), "the conversation's read")

    # The stream up to the queued input: the delta comes while the stream is behind the read.
    driver.execute_script("window.holdStream('input.submitted')")
    wait_for(lambda: body_data(driver, "deltas") == "1", "the delta handled by the page")
    next_frame(driver)
    assert texts(driver, STREAMING) == []
    driver.execute_script("window.holdStream(null)")   # (the view's reads still held: no refresh redraws)
    wait_for(lambda: body_data(driver, "lastEventId") == str(queued["seq"]), "the stream at the conversation's read")
    next_frame(driver)
    assert texts(driver, PANE_STREAMING) == FIRST_HALF
    assert texts(driver, PANE_ANSWERS) == []
    assert console_errors(driver) == []
