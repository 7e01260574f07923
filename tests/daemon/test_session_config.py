"""F-ACT-6 over HTTP: a session's model and thinking level change by event
(``PATCH /sessions/{id}``) and apply from its next model request; soft delete, fork (F-ACT-7) and
the list's status."""

from __future__ import annotations

from typing import Any

from events.store import Draft, open_store
from events.types import SessionQuarantined

from .conftest import Daemon, error_of, stop_daemon, wait_until

ASK = {"questions": [{"id": "go", "text": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}]}
CONFIG = {
    "providers": [{"id": "faux", "protocol": "faux",
                   "models": [{"id": "m1", "contextWindow": 8192}, {"id": "m2", "contextWindow": 8192}],
                   "script": [{"when": "start", "toolCalls": [{"name": "ask_user", "arguments": ASK}]}]}],
    "defaultModel": "faux/m1",
}


async def _session(d: Daemon) -> tuple[str, str]:
    token = await d.pair("config-client", strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def test_model_and_thinking_level_change_by_event_and_apply_from_the_next_request(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "start")

    async def asking():
        v = await d.view(token, sid)
        return v if v["status"] == "awaiting_answer" else None

    qid = (await wait_until(asking))["questions"][0]["questionId"]
    # Between two requests of one task (the first one answered with the question).
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
    assert r.status_code == 200, r.text
    assert (r.json()["model"], r.json()["thinkingLevel"]) == ("faux/m2", "high")
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "answer", "optionIds": ["yes"]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)

    events = await d.events(token, sid)
    requested = [(e["body"]["model"], e["body"]["thinking_level"]) for e in events if e["kind"] == "model.requested"]
    assert requested == [("m1", None), ("m2", "high")]
    configured = [e for e in events if e["kind"] == "session.configured"]
    assert [(e["body"]["model"], e["body"]["thinking_level"]) for e in configured] == [("faux/m2", "high")]
    listed = (await d.get("/sessions", token)).json()["sessions"]
    assert [(s["model"], s["thinkingLevel"]) for s in listed] == [("faux/m2", "high")]

    # A name alone; the thinking level alone (the model stays).
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"name": "renamed"})
    assert r.status_code == 200 and r.json()["name"] == "renamed"
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"thinkingLevel": "low"})
    assert (r.json()["model"], r.json()["thinkingLevel"], r.json()["name"]) == ("faux/m2", "low", "renamed")

    # It is the log's: the same after a restart.
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    v = await d2.view(token, sid)
    assert (v["model"], v["thinkingLevel"], v["name"]) == ("faux/m2", "low", "renamed")
    await d2.submit(token, sid, "r2", "hello")
    await d2.wait_idle(token, sid)
    last = [e for e in await d2.events(token, sid) if e["kind"] == "model.requested"][-1]
    assert (last["body"]["model"], last["body"]["thinking_level"]) == ("m2", "low")


async def test_a_bad_configuration_is_refused_and_changes_nothing(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    before = await d.events(token, sid)
    for body, status, code in [
        ({}, 422, "VALIDATION_FAILED"),
        ({"thinkingLevel": "extreme"}, 422, "VALIDATION_FAILED"),
        ({"model": "faux/nope"}, 422, "MODEL_UNKNOWN"),
        ({"model": ""}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/m2", "thinkingLevel": "bogus"}, 422, "VALIDATION_FAILED"),
        ({"name": "   "}, 422, "VALIDATION_FAILED"),
        ({"color": "red"}, 422, "VALIDATION_FAILED"),
        ([], 422, "VALIDATION_FAILED"),
    ]:
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=body)
        assert (r.status_code, error_of(r)) == (status, code), (body, r.text)
    r = await d.request("PATCH", f"/sessions/{sid}", token, content=b"{", headers={"Content-Type": "application/json"})
    assert (r.status_code, error_of(r)) == (400, "INVALID_JSON")
    r = await d.request("PATCH", "/sessions/ses_nope", token, json_body={"thinkingLevel": "low"})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")
    assert await d.events(token, sid) == before
    reader = await d.pair("config-reader")
    r = await d.request("PATCH", f"/sessions/{sid}", reader, json_body={"thinkingLevel": "low"})
    assert (r.status_code, error_of(r)) == (403, "FORBIDDEN")


async def test_a_repeated_change_is_recorded_once(daemon_factory):
    # A PATCH retried after a lost answer, or sent again by a second client, writes nothing more;
    # a PATCH changing one of two settings records only that one.
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    for _ in range(2):
        r = await d.request("PATCH", f"/sessions/{sid}", token,
                            json_body={"model": "faux/m2", "thinkingLevel": "high", "name": "n"})
        assert r.status_code == 200, r.text
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "low"})
    assert (r.json()["model"], r.json()["thinkingLevel"]) == ("faux/m2", "low")
    events = await d.events(token, sid)
    assert [(e["kind"], e["body"].get("model"), e["body"].get("thinking_level"), e["body"].get("name"))
            for e in events if e["kind"] in ("session.configured", "session.named")] == [
        ("session.configured", "faux/m2", "high", None), ("session.named", None, None, "n"),
        ("session.configured", None, "low", None)]


async def test_null_sets_the_model_and_thinking_level_back_to_the_default(daemon_factory):
    # ``null`` was taken as "unchanged" (and alone refused: "give at least one"), so a session
    # given a model could never follow the default model again. Left out still means unchanged.
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m2", "thinkingLevel": "high"})
    assert r.status_code == 200, r.text
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": None})
    assert r.status_code == 200, r.text
    assert (r.json()["model"], r.json()["thinkingLevel"]) == (None, "high")  # (thinkingLevel left out: kept)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"thinkingLevel": None, "model": None})
    assert (r.json()["model"], r.json()["thinkingLevel"]) == (None, None)
    configured = [e["body"] for e in await d.events(token, sid) if e["kind"] == "session.configured"]
    assert [(b["model"], b["thinking_level"], b["reset"]) for b in configured] == [
        ("faux/m2", "high", []), (None, None, ["model"]), (None, None, ["thinking_level"])]  # (a repeat: nothing)
    listed = (await d.get("/sessions", token)).json()["sessions"]
    assert [(s["model"], s["thinkingLevel"]) for s in listed] == [(None, None)]

    # The session follows the default model chain from its next request: config defaultModel,
    # then a default saved later.
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    r = await d.put("/models/default", token, {"model": "faux/m2"})
    assert r.status_code == 200, r.text
    await d.submit(token, sid, "r2", "hello again")
    await d.wait_idle(token, sid)
    requested = [(e["body"]["model"], e["body"]["thinking_level"])
                 for e in await d.events(token, sid) if e["kind"] == "model.requested"]
    assert requested == [("m1", None), ("m2", None)]

    # It is the log's: the same after a restart, and a session set again takes its own model.
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    v = await d2.view(token, sid)
    assert (v["model"], v["thinkingLevel"]) == (None, None)
    r = await d2.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/m1", "thinkingLevel": "low"})
    assert (r.json()["model"], r.json()["thinkingLevel"]) == ("faux/m1", "low")


async def test_null_sets_every_setting_the_patch_takes_back_to_its_default(daemon_factory):
    # Only model and thinkingLevel took null; a saved context setting, tool policy or name was
    # kept for good (null read as "unchanged"): the session could never follow the config again.
    config = {**CONFIG, "context": {"compaction": {"triggerPercent": 70}}}
    d = await daemon_factory(config=config)
    token, sid = await _session(d)
    saved = {"name": "named", "autoCompaction": False, "compactionTriggerPercent": 50, "pruneToolResults": True,
             "toolPolicy": {"get_system_time": {"enabled": False}}}
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=saved)
    assert r.status_code == 200 and r.json()["name"] == "named", r.text
    sources = (await d.get(f"/sessions/{sid}/context", token)).json()["settings"]["sources"]
    assert set(sources.values()) == {"saved"}

    async def settings_of(daemon: Daemon) -> tuple[Any, ...]:
        s = (await daemon.get(f"/sessions/{sid}/context", token)).json()["settings"]
        inv = (await daemon.get("/tools/inventory", token, params={"session": sid})).json()
        return ((await daemon.view(token, sid))["name"], s["autoCompaction"], s["compactionTriggerPercent"],
                s["pruneToolResults"], s["sources"], inv["sessionToolPolicy"])

    defaults = (None, True, 70, False, {"autoCompaction": "default", "compactionTriggerPercent": "config",
                                        "pruneToolResults": "default"}, {})
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"compactionTriggerPercent": None})
    assert r.status_code == 200, r.text
    after_one = {**{k: "saved" for k in sources}, "compactionTriggerPercent": "config"}
    assert (await settings_of(d))[2:5:2] == (70, after_one)
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={k: None for k in saved})
    assert r.status_code == 200, r.text
    assert await settings_of(d) == defaults
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={k: None for k in saved})  # (a repeat)
    assert r.status_code == 200, r.text
    configured = [e["body"] for e in await d.events(token, sid) if e["kind"] == "session.configured"]
    assert [(b["settings"], sorted(b["reset"])) for b in configured[1:]] == [
        ({}, ["compaction_trigger_percent"]),
        ({}, ["auto_compaction", "name", "prune_tool_results", "toolPolicy"])]
    assert [s["name"] for s in (await d.get("/sessions", token)).json()["sessions"]] == [None]

    # It is the log's: the same after a restart (replay and the sessions projection alike).
    await stop_daemon(d)
    d2 = await daemon_factory(config=config, root=d.root)
    assert await settings_of(d2) == defaults
    assert [s["name"] for s in (await d2.get("/sessions", token)).json()["sessions"]] == [None]


async def test_a_session_is_soft_deleted_by_event(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "start")  # (it asks a question: a run is open)

    async def asking():
        return (await d.view(token, sid))["status"] == "awaiting_answer"

    await wait_until(asking)
    r = await d.request("DELETE", f"/sessions/{sid}", token)
    assert (r.status_code, r.json()) == (200, {"deleted": True})
    view = await d.view(token, sid)  # still readable: nothing left the log
    assert (view["deleted"], view["status"], view["questions"]) == (True, "deleted", [])
    events = await d.events(token, sid)
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "session.deleted" and "run.aborted" in kinds and "question.cancelled" in kinds
    assert (await d.get("/sessions", token)).json()["sessions"] == []
    listed = (await d.get("/sessions", token, params={"includeDeleted": "true"})).json()["sessions"]
    assert [(s["id"], s["deleted"], s["status"]) for s in listed] == [(sid, True, "deleted")]  # as the view says
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "more"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"thinkingLevel": "low"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")
    # Deleting again is refused as any change of a deleted session is, and writes nothing; an
    # unknown session is 404.
    r = await d.request("DELETE", f"/sessions/{sid}", token)
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")
    assert await d.events(token, sid) == events
    r = await d.request("DELETE", "/sessions/ses_nope", token)
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND")
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert (await d2.view(token, sid))["status"] == "deleted"
    assert await d2.events(token, sid) == events


async def test_a_session_is_forked_from_one_of_its_events(daemon_factory):
    # F-ACT-7: the runtime could fork a session as of any of its events, but no route reached it.
    d = await daemon_factory()
    token = await d.pair("fork-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    for i, text in enumerate(("first question", "second question")):
        await d.submit(token, sid, f"r{i}", text)
        await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    first_answer = next(e["seq"] for e in events if e["kind"] == "model.responded")
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": first_answer, "name": "try again"})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["id"] != sid and fork["projectId"] == project["id"] and fork["name"] == "try again"
    assert fork["forkedFrom"] == {"sessionId": sid, "seq": first_answer} and fork["status"] == "idle"
    assert [it["text"] for it in fork["items"]] == ["first question", "(faux) You said: first question"]
    await d.submit(token, fork["id"], "again", "another second question")  # it goes on from there
    view = await d.wait_idle(token, fork["id"])
    assert view["items"][-1]["text"] == "(faux) You said: another second question"
    assert [it["text"] for it in (await d.view(token, sid))["items"]][-1] == "(faux) You said: second question"
    listed = {s["id"]: s for s in (await d.get("/sessions", token)).json()["sessions"]}
    assert listed[fork["id"]]["forkedFrom"] == {"sessionId": sid, "seq": first_answer}

    # Bad input: a clear code naming the problem, nothing created.
    other = (await d.session(token, project["id"]))["id"]
    other_seq = (await d.events(token, other))[0]["seq"]
    for body, status, code in (({"seq": other_seq}, 422, "VALIDATION_FAILED"),  # an event of another session
                               ({"seq": 0}, 422, "VALIDATION_FAILED"), ({"seq": 2**63}, 422, "VALIDATION_FAILED"),
                               ({"seq": "1"}, 422, "VALIDATION_FAILED"), ({}, 422, "VALIDATION_FAILED"),
                               ({"seq": 1, "extra": 1}, 422, "VALIDATION_FAILED"),
                               ({"seq": 2**63 - 1}, 422, "VALIDATION_FAILED")):  # the edge: in range, not an event
        r = await d.post(f"/sessions/{sid}/fork", token, body)
        assert (r.status_code, error_of(r)) == (status, code), (body, r.text)
    r = await d.post("/sessions/ses_nope/fork", token, {"seq": first_answer})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND"), r.text
    assert len((await d.get("/sessions", token)).json()["sessions"]) == 3


async def quarantined_session(daemon_factory) -> tuple[Daemon, str, str]:
    """A daemon restarted over a session with one answered input and a ``session.quarantined``
    recorded while no daemon ran (what the supervisor records after the last failed restart):
    the daemon, a strong-trust credential, the session's id."""
    d = await daemon_factory()
    token = await d.pair("quarantine-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    await stop_daemon(d)
    async with open_store(d.data_dir) as store:
        await store.append(Draft(SessionQuarantined(reason="replay failed 3 times"), project_id=project["id"],
                                 session_id=sid))
    return await daemon_factory(root=d.root), token, sid


async def test_the_list_says_quarantined_as_the_view_does(daemon_factory):
    # The sessions projection kept no quarantine: a quarantined session was listed `idle` (or
    # `running`, its task left open) while its view said `quarantined`.
    d2, token, sid = await quarantined_session(daemon_factory)
    view = await d2.view(token, sid)
    assert view["status"] == "quarantined"
    [listed] = (await d2.get("/sessions", token)).json()["sessions"]
    assert (listed["id"], listed["status"]) == (sid, "quarantined")


async def test_a_quarantined_session_can_be_deleted(daemon_factory):
    # F-ACT-6: soft delete was refused 409 SESSION_QUARANTINED, so a session that could no longer
    # run stayed in every list for good. Deleting records session.deleted and nothing else.
    d2, token, sid = await quarantined_session(daemon_factory)
    before = await d2.events(token, sid)
    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200 and r.json() == {"deleted": True}, r.text
    after = await d2.events(token, sid)
    assert [e["kind"] for e in after[len(before):]] == ["session.deleted"]
    assert (await d2.view(token, sid))["status"] == "deleted"
    assert (await d2.get("/sessions", token)).json()["sessions"] == []
    r = await d2.request("DELETE", f"/sessions/{sid}", token)
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "more"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")


async def test_each_setting_is_taken_at_its_limit_and_refused_one_past(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, sid = await _session(d)
    for body, code in [
        ({"compactionTriggerPercent": 1}, None), ({"compactionTriggerPercent": 100}, None),
        ({"compactionTriggerPercent": 0}, "VALIDATION_FAILED"), ({"compactionTriggerPercent": 101}, "VALIDATION_FAILED"),
        ({"name": "n" * 200}, None), ({"name": "n" * 201}, "VALIDATION_FAILED"),
        ({"thinkingLevel": "xhigh"}, None), ({"thinkingLevel": "XHIGH"}, "VALIDATION_FAILED"),
        ({"model": "faux/" + "m" * 195}, "MODEL_UNKNOWN"),  # 200 characters: checked, and not listed
        ({"model": "faux/" + "m" * 196}, "MODEL_UNKNOWN"),  # 201: refused at the door
        ({"toolPolicy": {f"t{i}": {"approval": "warn"} for i in range(1000)}}, None),
        ({"toolPolicy": {"one_more": {"approval": "warn"}}}, "VALIDATION_FAILED"),  # 1,001 once merged
        ({"toolPolicy": {"t0": None, "one_more": {"approval": "warn"}}}, None),  # still 1,000
        ({"toolPolicy": {f"u{i}": {"approval": "warn"} for i in range(1001)}}, "VALIDATION_FAILED"),
    ]:
        before = await d.events(token, sid)
        r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=body)
        if code is None:
            assert r.status_code == 200, (str(body)[:80], r.text[:300])
        else:
            assert (r.status_code, error_of(r)) == (422, code), (str(body)[:80], r.text[:300])
            assert await d.events(token, sid) == before
    view = await d.view(token, sid)
    assert (view["name"], view["thinkingLevel"]) == ("n" * 200, "xhigh")


async def test_the_built_in_faux_serves_only_the_model_it_lists(daemon_factory):
    """On built-in defaults ``GET /models`` lists ``faux/faux-1``, ``--model faux/x`` is refused at
    start and a saved default must be listed; yet ``POST /sessions`` and ``PATCH`` took
    ``faux/anything``. The listed model is the one it serves; another is ``MODEL_UNKNOWN``
    naming it, and nothing is recorded."""
    d = await daemon_factory()
    token = await d.pair("faux-client", strong=True)
    project = await d.project(token)
    assert [m["model"] for m in (await d.get("/models", token)).json()["models"] if m["provider"] == "faux"] == ["faux-1"]
    before = (await d.get("/health")).json()["lastSeq"]
    for model in ("faux/faux-2", "faux/anything", "faux/Faux-1"):
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": model})
        assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), (model, r.text)
        assert "faux-1" in r.json()["error"]["message"], r.text
    assert (await d.get("/health")).json()["lastSeq"] == before
    r = await d.post("/sessions", token, {"projectId": project["id"], "model": "faux/faux-1"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"model": "faux/faux-2"})
    assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), r.text
    assert (await d.view(token, sid))["model"] == "faux/faux-1"


async def test_a_retried_input_is_answered_as_its_first_try_after_the_session_was_deleted(daemon_factory):
    # F-ACT-3 / F-LOG-4: a client whose submit timed out asks again with the same requestId. If
    # another client deleted the session meanwhile, the retry was refused 409 SESSION_DELETED, as
    # a new input is: the client was told its input never landed, though the log holds it. (Found
    # by the soak, tests/daemon/test_soak.py.) A new requestId is still refused.
    d = await daemon_factory()
    token, sid = await _session(d)
    first = await d.submit(token, sid, "r1", "hello")
    await d.wait_idle(token, sid)
    r = await d.request("DELETE", f"/sessions/{sid}", token)
    assert r.status_code == 200, r.text
    before = await d.events(token, sid)
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hello"})
    assert r.status_code == 202, r.text
    assert r.json() == {"requestId": "r1", "seq": first["seq"], "duplicate": True}
    assert await d.events(token, sid) == before  # nothing written
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "more"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED")


async def test_a_retried_input_is_answered_as_its_first_try_after_the_session_was_quarantined(daemon_factory):
    d2, token, sid = await quarantined_session(daemon_factory)
    submitted = next(e for e in await d2.events(token, sid) if e["kind"] == "input.submitted")
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hello"})
    assert r.status_code == 202, r.text
    assert r.json() == {"requestId": "r1", "seq": submitted["seq"], "duplicate": True}
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "more"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_QUARANTINED")


async def test_a_bad_tool_policy_entry_is_named_by_its_tool_and_says_what_an_entry_takes(daemon, strong):
    """``toolPolicy`` is a map of tool names: msgspec names no key of a map (``at `$[...]```), so a
    refused entry read ``toolPolicy: Expected `object`, got `str` - at `$[...]``` without saying
    which tool's entry it was or what an entry takes. It is named as a config file's
    ``tools.policy`` is (``$.toolPolicy['run_command'].enabled``), with the entry's fields, and
    nothing is recorded."""
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    before = await daemon.events(strong, sid)
    fields = "toolPolicy['run_command'] takes {enabled?, approval?, workspaceAllowlist?, paramRestrictions?}"
    for entry, said in [
        ("deny", "Expected `object | null`, got `str` - at `$.toolPolicy['run_command']`; " + fields),
        ({"enabled": "no"}, "Expected `bool | null`, got `str` - at `$.toolPolicy['run_command'].enabled`"),
        ({"enabld": False}, "Object contains unknown field `enabld` - at `$.toolPolicy['run_command']`; " + fields),
        ({"approval": "ask"}, "- at `$.toolPolicy['run_command'].approval`; "
                              "toolPolicy['run_command'].approval takes 'none' or 'warn'"),
    ]:
        r = await daemon.request("PATCH", f"/sessions/{sid}", strong,
                                 json_body={"toolPolicy": {"get_system_time": {"enabled": False}, "run_command": entry}})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        message = r.json()["error"]["message"]
        assert message.startswith("the request body does not match: ") and said in message, (entry, message)
        assert "[...]" not in message, message
    assert await daemon.events(strong, sid) == before
