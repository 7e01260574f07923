"""The routes that take no body (docs/http-api.md: abort, withdraw, steer, compact, a job's stop, a
session's delete) take none alike: no body or ``{}`` is accepted, any field is 422
``VALIDATION_FAILED`` naming it, and nothing is recorded. Only compact refused a field; the
others read ``{"requestId": …}`` or ``{"agentId": …}`` and did something the client did not mean.
And a deleted session answers them all by one rule: read, forked, changed by nothing (409
``SESSION_DELETED``)."""

from __future__ import annotations

import pytest

from .conftest import Daemon, error_of


def bodyless(sid: str) -> list[tuple[str, str]]:
    return [("POST", f"/sessions/{sid}/abort"), ("POST", f"/sessions/{sid}/inputs/r1/withdraw"),
            ("POST", f"/sessions/{sid}/inputs/r1/steer"), ("POST", f"/sessions/{sid}/compact"),
            ("POST", f"/sessions/{sid}/jobs/job_x/stop"), ("DELETE", f"/sessions/{sid}")]


@pytest.mark.parametrize("body", [{"x": 1}, {"requestId": "r1"}, {"agentId": "main"}, {"reason": None}])
async def test_a_field_in_the_body_of_a_route_that_takes_none_is_refused_naming_it(daemon: Daemon, strong: str,
                                                                                 body: dict):
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    before = await daemon.events(strong, sid)
    field = next(iter(body))
    for method, path in bodyless(sid):
        r = await daemon.request(method, path, strong, json_body=body)
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (path, r.text)
        assert f"unknown field `{field}`" in r.json()["error"]["message"], (path, r.text)
    assert await daemon.events(strong, sid) == before


async def test_no_body_and_an_empty_object_are_accepted_by_each(daemon: Daemon, strong: str):
    sid = (await daemon.session(strong, (await daemon.project(strong))["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    for send in ({}, None):
        for method, path in bodyless(sid)[:-1]:
            r = await daemon.request(method, path, strong, json_body=send)
            # (each answers as it does any acceptable body: steering a settled input is 409
            # INPUT_NOT_QUEUED, a job that is not there 404; never a refusal of the body)
            if path.endswith(("/abort", "/withdraw")):
                assert r.status_code == 200, (send, path, r.text)
            else:
                assert r.status_code in (200, 404, 409), (send, path, r.text)
                assert r.status_code == 200 or error_of(r) in ("INPUT_NOT_QUEUED", "JOB_NOT_FOUND",
                                                               "NOTHING_TO_COMPACT"), (send, path, r.text)
    r = await daemon.request("DELETE", f"/sessions/{sid}", strong, json_body={})
    assert r.status_code == 200 and r.json()["deleted"] is True, r.text
