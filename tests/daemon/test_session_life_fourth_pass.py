"""A session's life through the daemon's HTTP API: forks of forks at what they inherited (F-ACT-7)."""

from __future__ import annotations

from .conftest import error_of, run_lens, stop_daemon


async def test_a_fork_of_a_fork_at_an_inherited_item_is_made_from_where_that_item_was_recorded(daemon_factory):
    # A fork's view shows the items it inherited with the seqs of its source's events; "fork from
    # here" on one of them was 422 "seq N is not an event of session <the fork>".
    d = await daemon_factory()
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    for rid in ("r1", "r2"):
        await d.submit(token, sid, rid, f"hello {rid}")
        await d.wait_idle(token, sid)
    last = (await d.events(token, sid))[-1]["seq"]
    fork = (await d.post(f"/sessions/{sid}/fork", token, {"seq": last})).json()
    [created] = await d.events(token, fork["id"])  # (its one event of its own)
    second = (await d.post(f"/sessions/{fork['id']}/fork", token, {"seq": created["seq"]})).json()
    first_answer = fork["items"][1]
    assert (first_answer["role"], first_answer["text"]) == ("assistant", "(faux) You said: hello r1")

    for source in (fork["id"], second["id"]):  # (a fork, and a fork of that fork)
        r = await d.post(f"/sessions/{source}/fork", token, {"seq": first_answer["seq"]})
        assert r.status_code == 201, r.text
        made = r.json()
        # The state as of that event, which the fork holds as its source held it: made from the
        # session whose event it is.
        assert made["forkedFrom"] == {"sessionId": sid, "seq": first_answer["seq"]}
        direct = (await d.post(f"/sessions/{sid}/fork", token, {"seq": first_answer["seq"]})).json()
        assert [(i["id"], i["text"]) for i in made["items"]] == [(i["id"], i["text"]) for i in direct["items"]] == [
            ("c5", "hello r1"), ("c7", "(faux) You said: hello r1")]

    # A seq past the fork point, or of no session in the chain, is still no event of the fork.
    other = (await d.session(token, fork["projectId"]))["id"]
    other_seq = (await d.events(token, other))[0]["seq"]
    for seq in (other_seq, other_seq + 1000):
        r = await d.post(f"/sessions/{fork['id']}/fork", token, {"seq": seq})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        assert f"seq {seq} is not an event of session '{fork['id']}'" in r.json()["error"]["message"]
    views = {s: await d.view(token, s) for s in (sid, fork["id"], second["id"])}
    await stop_daemon(d)
    assert "ok:" in (await run_lens(d.root, "log", "verify", "--data", "data")).stdout
    d2 = await daemon_factory(root=d.root)
    assert {s: await d2.view(token, s) for s in views} == views


async def test_a_seq_the_source_recorded_after_a_forks_fork_point_is_no_event_of_that_fork(daemon_factory):
    # The items the source records after a fork was made are not the fork's: forking the fork (or
    # a fork of it) at one of their seqs is 422 naming the fork asked for, not a fork of the source.
    d = await daemon_factory()
    token = await d.pair("c", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "r1", "hello r1")
    await d.wait_idle(token, sid)
    fork = (await d.post(f"/sessions/{sid}/fork", token, {"seq": (await d.events(token, sid))[-1]["seq"]})).json()
    [created] = await d.events(token, fork["id"])
    second = (await d.post(f"/sessions/{fork['id']}/fork", token, {"seq": created["seq"]})).json()
    await d.submit(token, sid, "r2", "hello r2")  # (in the source, after both forks were made)
    await d.wait_idle(token, sid)
    answer = (await d.view(token, sid))["items"][-1]
    assert (answer["role"], answer["text"]) == ("assistant", "(faux) You said: hello r2")
    for source in (fork["id"], second["id"]):
        r = await d.post(f"/sessions/{source}/fork", token, {"seq": answer["seq"]})
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
        assert f"seq {answer['seq']} is not an event of session '{source}'" in r.json()["error"]["message"]
    assert len((await d.get("/sessions", token)).json()["sessions"]) == 3  # (nothing made)
