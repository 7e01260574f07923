"""``GET /sessions/{id}`` over a long queue: the view's ``queued`` holds at most
``VIEW_QUEUED_MAX`` queued inputs, the next to run first, with ``queuedTotal`` counting them all;
``queuedStart`` / ``queuedLimit`` page through the rest.

The queue is built through the real daemon: a session whose run sleeps keeps every input sent
meanwhile queued."""

from __future__ import annotations

import pytest

from runtime.views import VIEW_QUEUED_MAX

from .conftest import BUSY, error_of


async def queue_up(daemon, token: str, sid: str, first: int, last: int) -> None:
    for i in range(first, last):
        await daemon.submit(token, sid, f"q{i}", f"queued {i}")


def ids(v: dict) -> list[str]:
    return [q["requestId"] for q in v["queued"]]


async def view(daemon, token: str, sid: str, **params: int | str) -> dict:
    r = await daemon.get(f"/sessions/{sid}", token, params=params)
    assert r.status_code == 200, r.text[:300]
    return r.json()


async def test_the_queue_is_whole_at_the_window_size_and_windowed_one_past_it(daemon, strong: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "busy", BUSY)
    await daemon.wait_running_call(strong, sid)
    v = await daemon.view(strong, sid)
    assert (v["queued"], v["queuedTotal"]) == ([], 0)
    await queue_up(daemon, strong, sid, 0, VIEW_QUEUED_MAX)
    v = await daemon.view(strong, sid)
    assert ids(v) == [f"q{i}" for i in range(VIEW_QUEUED_MAX)] and v["queuedTotal"] == VIEW_QUEUED_MAX
    assert v["queued"][0] == {"requestId": "q0", "text": "queued 0", "whenBusy": "followUp",
                              "seq": v["queued"][0]["seq"], "images": 0}
    assert "queuedStart" not in v   # (the shape of the common case, one key added)

    await queue_up(daemon, strong, sid, VIEW_QUEUED_MAX, VIEW_QUEUED_MAX + 1)
    v = await daemon.view(strong, sid)
    assert ids(v) == [f"q{i}" for i in range(VIEW_QUEUED_MAX)] and v["queuedTotal"] == VIEW_QUEUED_MAX + 1
    assert v["status"] == "running"

    # the rest, by its index; the end of the queue, empty; a page of one
    assert ids(await view(daemon, strong, sid, queuedStart=VIEW_QUEUED_MAX)) == [f"q{VIEW_QUEUED_MAX}"]
    assert ids(await view(daemon, strong, sid, queuedStart=VIEW_QUEUED_MAX + 1)) == []
    assert ids(await view(daemon, strong, sid, queuedStart=5, queuedLimit=2)) == ["q5", "q6"]
    seen: list[str] = []
    while len(seen) < VIEW_QUEUED_MAX + 1:
        page = await view(daemon, strong, sid, queuedStart=len(seen), queuedLimit=30)
        assert page["queuedTotal"] == VIEW_QUEUED_MAX + 1 and page["queued"]
        seen += ids(page)
    assert seen == [f"q{i}" for i in range(VIEW_QUEUED_MAX + 1)]

    r = await daemon.get(f"/sessions/{sid}?queuedStart={VIEW_QUEUED_MAX + 2}", strong)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text[:300]
    assert f"queuedStart {VIEW_QUEUED_MAX + 2} is past the session's {VIEW_QUEUED_MAX + 1} queued inputs" \
        in r.json()["error"]["message"]


@pytest.mark.parametrize("query", ["queuedLimit=0", f"queuedLimit={VIEW_QUEUED_MAX + 1}", "queuedLimit=x",
                                   "queuedStart=-1", "queuedStart=", "queuedStart=1&queuedStart=2"])
async def test_a_bad_queue_window_is_400_naming_its_parameter(daemon, strong: str, query: str):
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    r = await daemon.get(f"/sessions/{sid}?{query}", strong)
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text[:300]
    assert query.split("=")[0] in r.json()["error"]["message"]
