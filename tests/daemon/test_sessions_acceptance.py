"""SPEC §2 (F-ACT-3, F-ACT-6, F-ACT-7), §3 (F-CTX-5) and §9 read as a stranger's acceptance test
reads them, over HTTP only, with the built-in ``faux`` provider: the answers of withdraw, steer and
abort in every state of an input, ``whenBusy`` and its refusals, the events page at its limit and
one past, a request id as one session's own, a deleted session on every route, forks from a
deletion and from a session's first event (and a ``seq`` that is no event of the session refused
as one below 1 is), and usage counts a (faux) provider leaves unreported.

What earlier modules already pin (the 202 shape, duplicates across a restart, the body limit, the
bounds of the view's windows, usage totals) is not repeated here. Every wait is bounded
(conftest ``wait_until``)."""

from __future__ import annotations

from typing import Any

from events.store import Draft, open_store
from events.types import InstructionAppended, SessionCreated

from .conftest import BUSY, Daemon, error_of, stop_daemon, wait_until


async def _session(d: Daemon, client: str = "acceptance") -> tuple[str, str]:
    token = await d.pair(client, strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def _last_seq(d: Daemon) -> int:
    return (await d.get("/health")).json()["lastSeq"]


# --------------------------------------------------------------------------- F-ACT-3


async def test_withdraw_and_steer_answer_each_state_of_an_input_in_one_shape(daemon: Daemon):
    token, sid = await _session(daemon)
    base = f"/sessions/{sid}/inputs"
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    parts = [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]
    await daemon.submit(token, sid, "parts", parts)
    await daemon.submit(token, sid, "later", "a follow-up")
    await daemon.submit(token, sid, "steered", "a steer", whenBusy="steer")

    # steer of a queued steer: the same answer, nothing written
    before = await _last_seq(daemon)
    r = await daemon.post(f"{base}/steered/steer", token)
    assert (r.status_code, r.json()) == (200, {"requestId": "steered", "status": "queued", "whenBusy": "steer"})
    assert await _last_seq(daemon) == before
    # steer of the placed input, of an unknown one: 409 naming what the input is
    for rid, state in (("busy", "placed"), ("nope", "unknown")):
        r = await daemon.post(f"{base}/{rid}/steer", token)
        assert (r.status_code, error_of(r)) == (409, "INPUT_NOT_QUEUED"), r.text
        assert f"'{rid}'" in r.json()["error"]["message"] and state in r.json()["error"]["message"]

    # withdraw: the original text of a multi-part input (its text parts joined by a newline),
    # again on a repeat; placed and unknown carry no text and write nothing
    r = await daemon.post(f"{base}/parts/withdraw", token)
    assert (r.status_code, r.json()) == (200, {"requestId": "parts", "status": "withdrawn",
                                               "text": "part one\npart two"})
    after_withdraw = await _last_seq(daemon)
    for rid, status in (("parts", "withdrawn"), ("busy", "placed"), ("nope", "unknown"), ("a" * 200, "unknown")):
        r = await daemon.post(f"{base}/{rid}/withdraw", token)
        assert r.status_code == 200, r.text
        assert r.json() == {"requestId": rid, "status": status,
                            "text": "part one\npart two" if status == "withdrawn" else None}
    assert await _last_seq(daemon) == after_withdraw
    for op in ("withdraw", "steer"):  # one character past the id's limit
        r = await daemon.post(f"{base}/{'a' * 201}/{op}", token)
        assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT") and "requestId" in r.text

    # abort while running: the queued inputs, in submission order; each then answers withdrawn
    # with its text, the served one settled
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert (r.status_code, r.json()) == (200, {"aborted": True, "withdrawn": ["later", "steered"]})
    await daemon.wait_idle(token, sid)
    for rid, status, text in (("later", "withdrawn", "a follow-up"), ("steered", "withdrawn", "a steer"),
                              ("busy", "settled", None)):
        r = await daemon.post(f"{base}/{rid}/withdraw", token)
        assert r.json() == {"requestId": rid, "status": status, "text": text}, r.text
        r = await daemon.post(f"{base}/{rid}/steer", token)
        assert (r.status_code, error_of(r)) == (409, "INPUT_NOT_QUEUED") and status in r.text
    # abort while idle: nothing stopped, nothing written
    before = await _last_seq(daemon)
    r = await daemon.post(f"/sessions/{sid}/abort", token)
    assert (r.status_code, r.json()) == (200, {"aborted": False, "withdrawn": []})
    assert await _last_seq(daemon) == before


async def test_when_busy_takes_follow_up_and_steer_and_refuses_anything_else(daemon: Daemon):
    token, sid = await _session(daemon)
    before = await daemon.events(token, sid)
    for value in ("later", "Steer", "follow_up", "followup", "", 1, True, [], {}):
        r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "x", "content": "hi", "whenBusy": value})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), (value, r.text)
        assert "whenBusy" in r.json()["error"]["message"], value
    assert await daemon.events(token, sid) == before
    # followUp is the default, for whenBusy left out and sent as null (an optional field's null is
    # the field left out); a steer on an idle session simply starts its run
    await daemon.submit(token, sid, "plain", "one")
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "null", "one more", whenBusy=None)
    await daemon.wait_idle(token, sid)
    await daemon.submit(token, sid, "steer-idle", "two", whenBusy="steer")
    view = await daemon.wait_idle(token, sid)
    assert [it["text"] for it in view["items"]][-2:] == ["two", "(faux) You said: two"]
    submitted = [e for e in await daemon.events(token, sid) if e["kind"] == "input.submitted"]
    assert [e["body"]["when_busy"] for e in submitted] == ["followUp", "followUp", "steer"]


async def test_a_request_id_is_one_sessions_own(daemon: Daemon):
    # F-LOG-4: "already recorded for that session". The same id in another session is a new input.
    token, first = await _session(daemon)
    second = (await daemon.session(token, (await daemon.view(token, first))["projectId"]))["id"]
    a = await daemon.submit(token, first, "same", "to the first")
    b = await daemon.submit(token, second, "same", "to the second")
    assert a["duplicate"] is False and b["duplicate"] is False and a["seq"] != b["seq"]
    assert await daemon.submit(token, first, "same", "x") == {**a, "duplicate": True}
    assert await daemon.submit(token, second, "same", "x") == {**b, "duplicate": True}
    for sid, text in ((first, "to the first"), (second, "to the second")):
        view = await daemon.wait_idle(token, sid)
        assert [it["text"] for it in view["items"]] == [text, f"(faux) You said: {text}"]


# --------------------------------------------------------------------------- events page


async def test_the_events_page_at_its_limit_and_one_past(daemon_factory, tmp_path):
    # 1,200 events of one session, recorded before the daemon starts: a page of limit=1000 is
    # exactly 1,000 of them, and paging on by nextAfter reads each once.
    async with open_store(tmp_path / "data") as store:
        await store.append(Draft(SessionCreated(model="faux/faux-1"), project_id="prj_x", session_id="ses_many"))
        await store.append(*[Draft(InstructionAppended(text=f"note {i}"), project_id="prj_x", session_id="ses_many")
                             for i in range(1199)])
    d = await daemon_factory(root=tmp_path)
    token = await d.pair("reader", strong=False)
    url = "/sessions/ses_many/events"
    r = await d.get(url, token, params={"limit": "1000"})
    assert r.status_code == 200, r.text[:300]
    page = r.json()
    assert len(page["events"]) == 1000 and page["nextAfter"] == page["events"][-1]["seq"] == 1000
    r = await d.get(url, token)  # the default: 100
    assert len(r.json()["events"]) == 100 and r.json()["nextAfter"] == 100
    rest = (await d.get(url, token, params={"after": "1000", "limit": "1000"})).json()
    assert [e["seq"] for e in rest["events"]] == list(range(1001, 1201)) and rest["nextAfter"] == 1200
    # an empty page at the end keeps nextAfter where it was asked: poll again with it
    assert (await d.get(url, token, params={"after": "1200"})).json() == {"events": [], "nextAfter": 1200}
    assert [e["seq"] for e in (await d.get(url, token, params={"limit": "1"})).json()["events"]] == [1]
    for params, named in (({"limit": "1001"}, "limit"), ({"limit": "0"}, "limit"), ({"limit": "-1"}, "limit"),
                          ({"limit": "1.5"}, "limit"), ({"limit": ""}, "limit"), ({"after": "-1"}, "after"),
                          ({"after": "abc"}, "after"), ({"after": "1201"}, "after")):
        r = await d.get(url, token, params=params)
        assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), (params, r.text)
        assert r.json()["error"]["message"].startswith(named), (params, r.text)
    r = await d.get("/sessions/ses_none/events", token)
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")


# --------------------------------------------------------------------------- F-ACT-6, F-ACT-7


async def test_a_deleted_session_is_read_as_it_was_and_refuses_every_change(daemon: Daemon):
    token, sid = await _session(daemon)
    await daemon.submit(token, sid, "r1", "hello")
    await daemon.wait_idle(token, sid)
    r = await daemon.request("DELETE", f"/sessions/{sid}", token)
    assert (r.status_code, r.json()) == (200, {"deleted": True})
    events = await daemon.events(token, sid)
    view = await daemon.view(token, sid)
    assert (view["deleted"], view["status"]) == (True, "deleted")
    assert [it["text"] for it in view["items"]] == ["hello", "(faux) You said: hello"]

    for path in ("", "/events", "/context", "/jobs", "/changes"):
        r = await daemon.get(f"/sessions/{sid}{path}", token)
        assert r.status_code == 200, (path, r.text)
    changes: list[tuple[str, str, Any]] = [
        ("POST", "/inputs", {"requestId": "r2", "content": "more"}),
        ("POST", "/inputs/r1/withdraw", None), ("POST", "/inputs/r1/steer", None), ("POST", "/abort", None),
        ("PATCH", "", {"name": "renamed"}), ("PATCH", "", {"thinkingLevel": "high"}), ("DELETE", "", None),
        ("POST", "/compact", None), ("POST", "/questions/q_call_x/answer", {"kind": "skip"}),
    ]
    for method, path, body in changes:
        r = await daemon.request(method, f"/sessions/{sid}{path}", token, json_body=body)
        assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED"), (method, path, r.text)
        assert sid in r.json()["error"]["message"]
    # a retry of an input it recorded is answered as its first try was
    r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hello"})
    assert r.status_code == 202 and r.json()["duplicate"] is True
    assert await daemon.events(token, sid) == events


async def test_a_fork_from_the_deletion_or_the_first_event_starts_live_idle_and_empty_handed(daemon: Daemon):
    token, sid = await _session(daemon)
    await daemon.submit(token, sid, "busy", BUSY)
    await daemon.wait_running_call(token, sid)
    queued = await daemon.submit(token, sid, "q", "queued while busy")
    r = await daemon.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    events = await daemon.events(token, sid)
    assert events[-1]["kind"] == "session.deleted"

    cases = ((events[-1]["seq"], 2), (queued["seq"], 2), (events[0]["seq"], 0))
    for seq, items in cases:
        r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert r.status_code == 201, (seq, r.text)
        fork = r.json()
        assert (fork["deleted"], fork["status"], fork["queued"], fork["runningTaskId"]) == (False, "idle", [], None)
        assert fork["forkedFrom"] == {"sessionId": sid, "seq": seq} and len(fork["items"]) == items, fork["items"]
        assert fork["usage"]["requests"] == 0 and fork["usage"]["inputTokens"] is None
        await daemon.submit(token, fork["id"], "go", "from here")
        view = await daemon.wait_idle(token, fork["id"])
        assert view["items"][-1]["text"] == "(faux) You said: from here"
    # one past the source's last event, and past the log's end: not an event of this session
    for seq in (events[-1]["seq"] + 1, await _last_seq(daemon) + 1):
        r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        assert str(seq) in r.json()["error"]["message"] and sid in r.json()["error"]["message"]
    for seq in (-1, 0, 1.5, "3", None):
        r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), (seq, r.text)
        assert "seq" in r.json()["error"]["message"]


async def test_a_fork_seq_no_event_of_the_session_is_refused_as_one_below_1_is(daemon: Daemon):
    # One mistake, one answer: a seq below 1 was 422 VALIDATION_FAILED (the body's own rule), one
    # that is no event of the session 400 INVALID_ARGUMENT. Both are 422 naming `seq` now.
    token, sid = await _session(daemon)
    await daemon.submit(token, sid, "r1", "hello")
    await daemon.wait_idle(token, sid)
    events = await daemon.events(token, sid)
    first, last = events[0]["seq"], events[-1]["seq"]
    assert first > 1 and last == await _last_seq(daemon)  # (seq 1 is the log's, not this session's)

    async def sessions() -> int:
        return len((await daemon.get("/sessions", token)).json()["sessions"])

    before = await sessions()
    for seq in (0, 1, first - 1, last + 1):  # below 1, the log's first event, just before, just after
        r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), (seq, r.text)
        message = r.json()["error"]["message"]
        assert "seq" in message, message
        if seq >= 1:
            assert f"seq {seq} " in message and sid in message, message
    assert await sessions() == before  # nothing created
    for seq in (first, last):  # the session's own edges fork
        r = await daemon.post(f"/sessions/{sid}/fork", token, {"seq": seq})
        assert r.status_code == 201 and r.json()["forkedFrom"] == {"sessionId": sid, "seq": seq}, (seq, r.text)
    assert await sessions() == before + 2


# --------------------------------------------------------------------------- F-CTX-5

UNREPORTED = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "silent", "text": "nothing counted", "inputTokens": None, "outputTokens": None},
    {"when": "counted", "text": "all counted", "inputTokens": 40, "outputTokens": 2, "cacheReadTokens": 0,
     "cacheWriteTokens": 0, "reasoningTokens": 0},
]}], "defaultModel": "faux/faux-1"}
ALL_UNKNOWN = {"input_tokens": None, "output_tokens": None, "cache_read_tokens": None, "cache_write_tokens": None,
               "reasoning_tokens": None, "total_input_tokens": None}


async def test_counts_a_faux_turn_scripts_as_null_stay_unknown_never_zero(daemon_factory):
    # A faux turn reports word counts for input and output unless scripted; one scripted with
    # null reported them all the same, so no script could play a provider that leaves them out.
    d = await daemon_factory(config=UNREPORTED)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "silent")
    await d.wait_idle(token, sid)
    [usage] = [e["body"]["usage"] for e in await d.events(token, sid) if e["kind"] == "model.responded"]
    assert usage == ALL_UNKNOWN
    assert (await d.view(token, sid))["usage"] == {
        "requests": 1, "inputTokens": None, "outputTokens": None, "cacheReadTokens": None, "cacheWriteTokens": None,
        "reasoningTokens": None, "totalInputTokens": None, "unreported": dict.fromkeys(
            ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens",
             "totalInputTokens"), 1)}
    # A count of 0 that is reported is 0, and the totals say one request did not report.
    await d.submit(token, sid, "r2", "counted")
    await d.wait_idle(token, sid)
    totals = (await d.view(token, sid))["usage"]
    assert {k: totals[k] for k in ("requests", "inputTokens", "outputTokens", "cacheReadTokens")} == {
        "requests": 2, "inputTokens": 40, "outputTokens": 2, "cacheReadTokens": 0}
    assert set(totals["unreported"].values()) == {1}
    # The same from the log after a restart.
    await stop_daemon(d)
    d2 = await daemon_factory(config=UNREPORTED, root=d.root)
    assert (await d2.view(token, sid))["usage"] == totals
    # Left out, the two counts are the faux provider's word counts, as documented.
    await d2.submit(token, sid, "r3", "plain words here")
    await d2.wait_idle(token, sid)
    last = [e["body"]["usage"] for e in await d2.events(token, sid) if e["kind"] == "model.responded"][-1]
    assert isinstance(last["input_tokens"], int) and last["output_tokens"] == len("(faux) You said: plain words here".split())


def test_a_script_count_that_is_no_count_is_refused_naming_it():
    # (the script is read with the config: a negative or non-integer count names itself)
    from runtime.providers.faux import FauxProvider

    for bad in ({"inputTokens": -1}, {"outputTokens": 1.5}, {"inputTokens": "3"}):
        try:
            FauxProvider.from_config("faux", [{"text": "x", **bad}])
        except ValueError as exc:
            assert next(iter(bad)) in str(exc), exc
        else:
            raise AssertionError(f"{bad} was taken")
