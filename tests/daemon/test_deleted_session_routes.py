"""One rule for a deleted session, route by route (docs/http-api.md, docs/errors.md ``SESSION_DELETED``):
what it recorded is still read (view, events, context, jobs, changes, the tool inventory) and
forked; every change is 409 ``SESSION_DELETED`` naming the session, also one that would write
nothing (a withdraw of an input the deletion already withdrew, an abort with nothing running),
save the retry of an input it recorded, answered as its first try was. Its workspace is no
longer browsed through it (409 too). Nothing is written by any of them."""

from __future__ import annotations

from .conftest import Daemon, error_of


async def test_a_deleted_session_is_read_and_forked_and_refuses_every_change(daemon: Daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    first = await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    r = await daemon.request("DELETE", f"/sessions/{sid}", strong)
    assert r.status_code == 200 and r.json()["deleted"] is True, r.text
    before = await daemon.events(strong, sid)
    reads = [f"/sessions/{sid}", f"/sessions/{sid}/events", f"/sessions/{sid}/context", f"/sessions/{sid}/jobs",
             f"/sessions/{sid}/changes", f"/tools/inventory?session={sid}"]
    for path in reads:
        r = await daemon.get(path, strong)
        assert r.status_code == 200, (path, r.text)
    changes = [("POST", "/inputs", {"requestId": "r2", "content": "x"}), ("POST", "/inputs/r1/withdraw", {}),
               ("POST", "/inputs/r9/withdraw", {}), ("POST", "/inputs/r1/steer", {}), ("POST", "/abort", {}),
               ("POST", "/compact", {}), ("POST", "/context/snip", {"olderImages": True}),
               ("POST", "/context/include", {"callId": "c1"}), ("POST", "/context/unsnip", {"itemIds": ["x"]}),
               ("POST", "/context/hide", {"itemIds": ["x"]}), ("POST", "/context/unhide", {"itemIds": ["x"]}),
               ("POST", "/jobs/job_x/stop", {}), ("POST", "/questions/q1/answer", {"kind": "skip"}),
               ("PATCH", "", {"name": "n"}), ("DELETE", "", None)]
    for method, tail, body in changes:
        r = await daemon.request(method, f"/sessions/{sid}{tail}", strong, json_body=body)
        assert r.status_code == 409 and error_of(r) == "SESSION_DELETED", (method, tail, r.text)
        assert r.json()["error"]["message"].startswith(f"session {sid!r} was deleted"), r.text
    r = await daemon.get(f"/sessions/{sid}/workspace/tree", strong)
    assert r.status_code == 409 and error_of(r) == "SESSION_DELETED", r.text
    # (worded as the changes are, and saying what is refused)
    assert r.json()["error"]["message"] == f"session {sid!r} was deleted; its workspace is not browsed through it", r.text
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "r1", "content": "hello"})
    assert r.status_code == 202 and r.json() == {**first, "duplicate": True}, r.text
    assert await daemon.events(strong, sid) == before
    r = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": before[-1]["seq"]})
    assert r.status_code == 201 and r.json()["id"] != sid, r.text
