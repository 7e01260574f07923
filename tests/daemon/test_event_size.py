"""The maximum event size (``log.maxEventBytes``, F-LOG-6) through the daemon: an input the log
cannot hold is the client's error."""

from __future__ import annotations

from .conftest import error_of

SMALL = {"log": {"maxEventBytes": 64 * 1024}}  # the lowest the config takes, under the 1 MiB body limit


async def test_an_input_past_the_maximum_event_size_is_413_and_harms_no_session(daemon_factory) -> None:
    # It crashed the actor: 503 "retry it", and the retries the message asked for quarantined the
    # session on the fourth try, refusing every later input.
    d = await daemon_factory(config=SMALL)
    token = await d.pair("c1", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    before = await d.events(token, sid)
    for _ in range(5):
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "big", "content": "y" * 70_000})
        assert r.status_code == 413, r.text
        assert error_of(r) == "APPEND_REJECTED"
        assert "65536" in r.json()["error"]["message"]
    assert await d.events(token, sid) == before  # nothing written
    assert (await d.submit(token, sid, "small", "hello"))["duplicate"] is False
    view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"

