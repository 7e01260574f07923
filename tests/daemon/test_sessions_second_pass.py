"""SPEC §2 (F-ACT-1, F-ACT-3, F-ACT-6) and §9 read a second time as a user drives them: a real
daemon on a loopback port, the ``faux`` provider, every call over HTTP. What the earlier modules
pin (the 202 shape, withdraw/steer/abort in each state, ``whenBusy`` refusals, duplicates with
other content, the queue's order in the view, a configuration sent mid-request) is not repeated.
Every wait is bounded (conftest ``wait_until``)."""

from __future__ import annotations

import random
from typing import Any

import httpx2
import trio

from ..files.sample_images import PNG
from .conftest import API, BUSY, LIMIT, Daemon, auth, awaiting_an_answer, error_of, stop_daemon
from .test_routes import store_artifact

BURST = 300  # inputs sent at the same moment, each on a connection of its own
ASK = {"questions": [{"id": "go", "text": "Go on?", "options": [{"id": "yes", "label": "Yes"}]}]}
ASKING = {"providers": [{"id": "faux", "protocol": "faux", "script": [
    {"when": "ask", "toolCalls": [{"name": "ask_user", "arguments": ASK}]}]}], "defaultModel": "faux/faux-1"}


async def _session(d: Daemon, client: str = "second-pass") -> tuple[str, str]:
    token = await d.pair(client, strong=True)
    project = await d.project(token)
    return token, (await d.session(token, project["id"]))["id"]


async def _queued(d: Daemon, token: str, sid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        r = await d.get(f"/sessions/{sid}", token, params={"queuedStart": str(len(out)), "queuedLimit": "100"})
        assert r.status_code == 200, r.text
        page = r.json()["queued"]
        out.extend(page)
        if not page:
            return out


# --------------------------------------------------------------------------- F-ACT-3 under a burst


async def test_a_burst_of_inputs_from_several_clients_at_once_is_each_answered_and_queued_once(daemon: Daemon):
    # Three clients send 300 inputs at the same moment, each on its own connection (a dashboard
    # reconnecting with its retries, a script fanning out), plus a retry of every tenth under
    # another client with other content. The daemon listened with hypercorn's backlog of 100:
    # past it the kernel's SYN cookies stood in for the queue, and connections it could not take
    # in time were reset ("Connection reset by peer"), the client not knowing whether its input
    # was recorded. Every one is answered now, and the log holds each request id once.
    tokens = [await daemon.pair(f"burst-{i}", strong=True) for i in range(3)]
    project = await daemon.project(tokens[0])
    sid = (await daemon.session(tokens[0], project["id"]))["id"]
    await daemon.submit(tokens[0], sid, "busy", BUSY)
    await daemon.wait_running_call(tokens[0], sid)

    rnd = random.Random(7)
    plan = [(f"r{i:03d}", rnd.choice(["followUp", "steer"]), i % 3) for i in range(BURST)]
    answers: dict[str, list[tuple[int, Any]]] = {rid: [] for rid, _, _ in plan}
    limits = httpx2.Limits(max_connections=BURST, max_keepalive_connections=0)
    clients = [httpx2.AsyncClient(base_url=daemon.url, timeout=LIMIT * 3, limits=limits) for _ in range(3)]
    try:
        async def send(rid: str, when_busy: str, client: int, content: str) -> None:
            r = await clients[client].post(f"{API}/sessions/{sid}/inputs", headers=auth(tokens[client]),
                                           json={"requestId": rid, "content": content, "whenBusy": when_busy})
            answers[rid].append((r.status_code, r.json()))

        async with trio.open_nursery() as nursery:
            for i, (rid, when_busy, client) in enumerate(plan):
                nursery.start_soon(send, rid, when_busy, client, f"text of {rid}")
                if i % 10 == 0:
                    nursery.start_soon(send, rid, "followUp", (client + 1) % 3, f"a retry of {rid}")
    finally:
        for client in clients:
            await client.aclose()

    firsts: dict[str, dict[str, Any]] = {}
    for rid, got in answers.items():
        assert all(status == 202 for status, _ in got), (rid, got)
        bodies = [body for _, body in got]
        assert len({b["seq"] for b in bodies}) == 1 and [b["duplicate"] for b in bodies].count(False) == 1, (rid, got)
        firsts[rid] = next(b for b in bodies if not b["duplicate"])

    events = await daemon.events(tokens[0], sid)
    submitted = [e for e in events if e["kind"] == "input.submitted" and e["request_id"] != "busy"]
    assert sorted(e["request_id"] for e in submitted) == sorted(answers)
    assert {e["request_id"]: e["seq"] for e in submitted} == {rid: b["seq"] for rid, b in firsts.items()}
    # The queue: the steers, then the follow-ups, each in the order the log recorded them.
    by_seq = sorted(submitted, key=lambda e: e["seq"])
    expected = ([e["request_id"] for e in by_seq if e["body"]["when_busy"] == "steer"]
                + [e["request_id"] for e in by_seq if e["body"]["when_busy"] == "followUp"])
    assert [q["requestId"] for q in await _queued(daemon, tokens[0], sid)] == expected
    r = await daemon.post(f"/sessions/{sid}/abort", tokens[0])
    assert r.status_code == 200 and r.json()["withdrawn"] == [e["request_id"] for e in by_seq], r.text


# --------------------------------------------------------------------------- F-LOG-4 on a retry


async def test_a_retry_of_a_recorded_input_is_its_first_answer_whatever_its_images_say_now(daemon: Daemon):
    # "A requestId sent again is answered duplicate: true with its first seq, whatever its
    # content" (docs/http-api.md): the actor answers a retry before its own checks (blank content,
    # a model that cannot serve), but the route checked an input's image parts first, so a retry
    # whose image the daemon no longer holds (its file gone or damaged since the first try), or
    # whose parts changed, was 404 ARTIFACT_NOT_FOUND, 500 ARTIFACT_CORRUPT or 422
    # IMAGE_UNSUPPORTED, telling the client its input never landed though the log holds it.
    token, sid = await _session(daemon)
    aid = store_artifact(daemon, PNG)
    image = {"type": "image", "artifactId": aid, "mime": "image/png"}
    first = await daemon.submit(token, sid, "r1", [{"type": "text", "text": "what is this?"}, image])
    await daemon.wait_idle(token, sid)
    events = await daemon.events(token, sid)

    missing = {"type": "image", "artifactId": "0" * 64, "mime": "image/png"}
    async def retried(content: Any) -> None:
        r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": content})
        assert (r.status_code, r.json()) == (202, {**first, "duplicate": True}), (str(content)[:120], r.text)

    await retried([image, missing])  # an artifact the daemon does not hold
    await retried([{**image, "mime": "image/jpeg"}])  # a type its bytes are not
    await retried([{**image, "mime": "text/plain"}])  # a type no model takes
    await retried([image] * 21)  # past the 20 images of one input
    (daemon.data_dir / "artifacts" / aid).write_bytes(PNG[:-1] + b"x")  # damaged since the first try
    await retried([{"type": "text", "text": "what is this?"}, image])  # (the first try's very content)
    (daemon.data_dir / "artifacts" / aid).unlink()  # then gone
    await retried([{"type": "text", "text": "what is this?"}, image])
    # The same parts under a new request id are refused as before, naming the problem.
    r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": [missing]})
    assert (r.status_code, error_of(r)) == (404, "ARTIFACT_NOT_FOUND") and "0" * 64 in r.text, r.text
    r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": [image] * 21})
    assert (r.status_code, error_of(r)) == (422, "IMAGE_UNSUPPORTED") and "21 images" in r.text, r.text
    assert await daemon.events(token, sid) == events
    # Deleted, the session still answers the retry as its first try, and refuses a new input.
    assert (await daemon.request("DELETE", f"/sessions/{sid}", token)).status_code == 200
    r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": [missing]})
    assert (r.status_code, r.json()) == (202, {**first, "duplicate": True}), r.text
    r = await daemon.post(f"/sessions/{sid}/inputs", token, {"requestId": "r3", "content": [missing]})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED") and sid in r.text, r.text
    # A session that never was: the session is named, not the image.
    unknown = "ses_" + "0" * 26
    r = await daemon.post(f"/sessions/{unknown}/inputs", token, {"requestId": "r4", "content": [missing]})
    assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND") and unknown in r.text, r.text


# --------------------------------------------------------------------------- F-ACT-6: deletion


async def test_a_session_deleted_with_inputs_queued_records_them_withdrawn_by_the_deletion(daemon_factory):
    # A deletion stops the run and withdraws what is queued, as an abort does; the log said
    # `reason: "abort"` for each input (and "run aborted" for the open question), though the
    # event's own type has `session_deleted` for this and the run's end said "session deleted".
    # A reader of the log (or of the stream) could not tell a deletion from a user's abort.
    d = await daemon_factory(config=ASKING)
    token = await d.pair("deleter", strong=True)
    sid, view = await awaiting_an_answer(d, token, "ask")
    qid = view["questions"][0]["questionId"]
    queued = {rid: await d.submit(token, sid, rid, f"text of {rid}", whenBusy=when)
              for rid, when in (("f1", "followUp"), ("s1", "steer"), ("f2", "followUp"))}
    r = await d.request("DELETE", f"/sessions/{sid}", token)
    assert (r.status_code, r.json()) == (200, {"deleted": True}), r.text

    events = await d.events(token, sid)
    tail = events[[e["kind"] for e in events].index("tool.finished"):]
    assert [(e["kind"], e["body"].get("input_request_id"), e["body"].get("reason")) for e in tail] == [
        ("tool.finished", None, None),  # the question's call, interrupted
        ("run.aborted", None, "session deleted"), ("task.finished", None, "session deleted"),
        # (in submission order, as an abort withdraws them)
        ("input.withdrawn", "f1", "session_deleted"), ("input.withdrawn", "s1", "session_deleted"),
        ("input.withdrawn", "f2", "session_deleted"),
        ("question.cancelled", None, "session deleted"), ("session.deleted", None, ""),
    ], [(e["kind"], e["body"]) for e in tail]
    view = await d.view(token, sid)
    assert (view["status"], view["queued"], view["queuedTotal"], view["runningTaskId"]) == ("deleted", [], 0, None)
    # The inputs it withdrew: a retry is answered as the first try was; a withdraw is refused.
    for rid, first in queued.items():
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": "again"})
        assert (r.status_code, r.json()) == (202, {**first, "duplicate": True}), r.text
        r = await d.post(f"/sessions/{sid}/inputs/{rid}/withdraw", token)
        assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED") and sid in r.text, r.text
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "skip"})
    assert (r.status_code, error_of(r)) == (409, "SESSION_DELETED"), r.text
    # Nothing of it runs after a restart either.
    await stop_daemon(d)
    d2 = await daemon_factory(config=ASKING, root=d.root)
    assert (await d2.view(token, sid))["status"] == "deleted"
    assert await d2.events(token, sid) == events
