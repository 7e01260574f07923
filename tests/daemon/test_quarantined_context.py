"""``GET /sessions/{id}/context`` of a quarantined session answers as its view does: what the log
holds while it reads whole; a clear 409 naming the damaged event (its seq) when it does not, the
same answer as the view's."""

from __future__ import annotations

from typing import Any

from events.store import Draft, open_store
from events.types import SessionQuarantined

from ..rawlog import edit_log, log_rows
from .conftest import error_of, stop_daemon, wait_until

CONFIG = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "m1", "contextWindow": 50000}],
                         "script": [{"when": "call a tool",
                                     "toolCalls": [{"name": "get_system_time", "arguments": {}}]}]}],
          "defaultModel": "faux/m1"}


async def _answered(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("quarantine-client", strong=True)
    reader = await d.pair("quarantine-reader")
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "hello; call a tool")
    await d.wait_idle(token, sid)
    r = await d.post(f"/sessions/{sid}/context/snip", token,
                     {"itemIds": [(await d.view(token, sid))["items"][0]["id"]]})
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    context = (await d.get(f"/sessions/{sid}/context", reader)).json()
    await stop_daemon(d)
    return d, token, reader, project["id"], sid, context


async def test_a_quarantined_session_whose_log_reads_whole_describes_its_context(daemon_factory):
    # After a restart a recorded quarantine is read by a woken actor, the context as the view: the
    # same answer a session quarantined in this process now gives (tests/runtime/test_supervisor.py).
    d, token, reader, project_id, sid, context = await _answered(daemon_factory)
    async with open_store(d.data_dir) as store:
        await store.append(Draft(SessionQuarantined(reason="replay failed 3 times"), project_id=project_id,
                                 session_id=sid))
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.view(reader, sid))["status"] == "quarantined"
    r = await d2.get(f"/sessions/{sid}/context", reader)
    assert r.status_code == 200, r.text
    assert r.json() == context
    assert r.json()["items"][0]["context"] == "snipped"
    # An agent the session does not have: the same 404 as a live session's (and the view's).
    r = await d2.get(f"/sessions/{sid}/context", reader, params={"agentId": "agent_nope"})
    live = (await d2.get(f"/sessions/{sid}/context", reader)).status_code
    assert live == 200 and (r.status_code, error_of(r)) == (404, "AGENT_NOT_FOUND"), r.text
    # Still no actor: nothing to run, nothing recorded.
    r = await d2.post(f"/sessions/{sid}/compact", token)
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text
    # The refusal names the way on: a fork, which the quarantine does not stop.
    assert r.json()["error"]["message"].endswith(f"to go on, fork it (POST /sessions/{sid}/fork)"), r.text
    last = (await d2.events(reader, sid))[-1]["seq"]
    r = await d2.post(f"/sessions/{sid}/fork", token, {"seq": last})
    assert r.status_code == 201 and r.json()["status"] == "idle", r.text


async def _with_a_damaged_answer(daemon_factory: Any) -> tuple[Any, Any, str, str, str, str, int]:
    """An answered session whose ``model.responded`` body is then damaged in the log, and a
    daemon started on it: the first daemon, the second, the credentials, the project and session
    ids, and the damaged seq."""
    d, token, reader, project_id, sid, _context = await _answered(daemon_factory)
    d0 = await daemon_factory(config=CONFIG, root=d.root)
    events = await d0.events(token, sid)
    await stop_daemon(d0)
    bad = next(e["seq"] for e in events if e["kind"] == "model.responded")
    edit_log(d.data_dir, "UPDATE events SET body = X'28b52ffd0000' WHERE seq = ?", (bad,))
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    return d, d2, token, reader, project_id, sid, bad


async def _quarantined(daemon: Any, reader: str, sid: str) -> Any:
    """The session's view once it answers 409 (its replay failed: quarantined)."""
    async def answered_409():
        r = await daemon.get(f"/sessions/{sid}", reader)
        return r if r.status_code == 409 else None

    return await wait_until(answered_409, what="the session quarantined")


async def test_a_session_quarantined_for_a_damaged_event_names_it_on_both_routes(daemon_factory):
    d, d2, token, reader, _project_id, sid, bad = await _with_a_damaged_answer(daemon_factory)

    view = await _quarantined(d2, reader, sid)
    assert error_of(view) == "SESSION_QUARANTINED"
    message = view.json()["error"]["message"]
    assert f"seq {bad}" in message, message
    r = await d2.get(f"/sessions/{sid}/context", reader)
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text
    assert r.json()["error"]["message"] == message


async def test_a_fork_at_the_damaged_event_itself_says_to_fork_earlier(daemon_factory):
    # A fork at the damaged event answers as one after it does: EVENT_CORRUPT naming the session,
    # the damaged seq and the way on (an earlier seq); nothing is created. A fork just before it works.
    d, d2, token, reader, project_id, sid, bad = await _with_a_damaged_answer(daemon_factory)
    r = await d2.get(f"/sessions/{sid}", reader)
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text
    assert f"seq {bad}" in r.text and f"to go on, fork it (POST /sessions/{sid}/fork)" in r.text, r.text
    answers = []
    for seq in (bad, bad + 1):
        r = await d2.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (500, "EVENT_CORRUPT"), r.text
        answers.append(r.json()["error"]["message"])
    for seq, message in zip((bad, bad + 1), answers):
        assert f"session '{sid}' cannot be read up to seq {seq}" in message, message
        assert f"seq {bad}:" in message and message.endswith("fork from an earlier seq"), message
    assert [s["id"] for s in (await d2.get("/sessions", reader, params={"project": project_id})).json()["sessions"]] == [sid]
    r = await d2.post(f"/sessions/{sid}/fork", token, {"seq": bad - 1})
    assert r.status_code == 201, r.text
    # A seq of another session is still the 422 it always was, damaged or not.
    other = (await d2.session(token, project_id))["id"]
    r = await d2.post(f"/sessions/{other}/fork", token, {"seq": bad})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED") and f"seq {bad}" in r.text, r.text


async def test_a_deleted_quarantined_session_whose_log_cannot_be_read_is_viewed_as_deleted(daemon_factory):
    # A deleted session's view is 200, status `deleted`; a deleted quarantined one whose log does
    # not read whole answered 409 SESSION_QUARANTINED. It now answers as deleted: what its log reads
    # up to the damaged event (the input before it), and so does its context; after a restart too,
    # from the first read on (which wakes an actor that fails and quarantines the session again:
    # that read answered SESSION_QUARANTINED or SESSION_UNAVAILABLE, only later ones as deleted).
    d, d2, token, reader, _project_id, sid, bad = await _with_a_damaged_answer(daemon_factory)

    await _quarantined(d2, reader, sid)

    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200 and r.json() == {"deleted": True}, r.text
    for daemon in (d2, None):
        if daemon is None:
            await stop_daemon(d2)
            daemon = await daemon_factory(config=CONFIG, root=d.root)
        r = await daemon.get(f"/sessions/{sid}", reader)
        assert r.status_code == 200, r.text
        view = r.json()
        assert (view["id"], view["status"], view["deleted"]) == (sid, "deleted", True), view
        assert [it["text"] for it in view["items"] if it["role"] == "user"] == ["hello; call a tool"], view["items"]
        assert view["lastSeq"] < bad, view["lastSeq"]
        r = await daemon.get(f"/sessions/{sid}/context", reader)
        assert r.status_code == 200, r.text
        # still no change taken: a deleted session refuses them
        r = await daemon.post(f"/sessions/{sid}/compact", token)
        assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED"), r.text


async def test_a_retry_to_a_session_quarantined_for_a_damaged_event_is_its_duplicate(daemon_factory):
    # F-LOG-4: a recorded request id is answered with the original, "also ... when its session
    # has since been deleted or quarantined" (storage-format.md). A session quarantined in this
    # run (its replay fails) answered every submit 409, so a client retrying an input the log
    # holds was told it never landed. A new request id is still 409; nothing is written.
    d, d2, token, reader, _project_id, sid, bad = await _with_a_damaged_answer(daemon_factory)

    await _quarantined(d2, reader, sid)
    [(first,)] = log_rows(d.data_dir, "SELECT seq FROM events WHERE session_id = ? AND request_id = 'r1'", (sid,))
    last = (await d2.get("/health")).json()["lastSeq"]
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "another text"})
    assert r.status_code == 202, r.text
    assert r.json() == {"requestId": "r1", "seq": first, "duplicate": True}, r.text
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "hello"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text
    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    again = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "after the deletion"})
    assert (again.status_code, again.json()) == (202, {"requestId": "r1", "seq": first, "duplicate": True}), again.text
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r3", "content": "hello"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED"), r.text
    assert (await d2.get("/health")).json()["lastSeq"] == last + 1  # the session.deleted alone


async def test_a_retry_as_the_first_call_after_a_restart_is_its_duplicate(daemon_factory):
    # The first call to a session whose log cannot be read wakes an actor whose replay fails and
    # quarantines it; that call was answered 409 SESSION_QUARANTINED though it retried an input the
    # log holds (and a second try 202 duplicate). It is answered as the later ones are.
    d, d2, token, _reader, _project_id, sid, _bad = await _with_a_damaged_answer(daemon_factory)
    [(first,)] = log_rows(d.data_dir, "SELECT seq FROM events WHERE session_id = ? AND request_id = 'r1'", (sid,))
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "another text"})
    assert (r.status_code, r.json()) == (202, {"requestId": "r1", "seq": first, "duplicate": True}), r.text
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "hello"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED"), r.text
    # a requestId of the form reserved for inputs recorded without one: refused as a live session does
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "seq:1", "content": "hello"})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED") and "reserved" in r.text, r.text
