"""The maximum event size (``log.maxEventBytes``, F-LOG-6) through the daemon: a request whose event
the log cannot hold (an input, an answer) is the client's error, and lowering the maximum leaves
what the log holds readable."""

from __future__ import annotations

from events.codec import Codec
from events.types import InputSubmitted, TextPart

from .conftest import error_of, stop_daemon
from .test_question_restart import CONFIG as ASKING, _asking

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


async def test_an_answer_past_the_maximum_event_size_is_413_and_the_question_stays_open(daemon_factory) -> None:
    # 20,000 characters (the answer's limit) of four UTF-8 bytes each pass 64 KiB. The refused
    # append crashed the actor, whose restart cancelled the question: the user could not answer.
    d = await daemon_factory(config={**ASKING, **SMALL})
    token, sid, view = await _asking(d)
    qid = view["questions"][0]["questionId"]
    url = f"/sessions/{sid}/questions/{qid}/answer"
    r = await d.post(url, token, {"kind": "answer", "text": "\U0001F600" * 20_000})
    assert r.status_code == 413 and error_of(r) == "APPEND_REJECTED", r.text
    assert (await d.view(token, sid))["status"] == "awaiting_answer"
    r = await d.post(url, token, {"kind": "answer", "optionIds": ["blue"]})
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)


async def test_a_lowered_maximum_event_size_leaves_stored_events_readable(daemon_factory) -> None:
    # Sessions holding an event larger than the new maximum were quarantined at once (their
    # replay refused it as EVENT_TOO_LARGE) and the events route answered 500.
    d = await daemon_factory()
    token = await d.pair("c1", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    await d.submit(token, sid, "big", "x" * 200_000)
    await d.wait_idle(token, sid)
    before = await d.events(token, sid)
    await stop_daemon(d)

    d2 = await daemon_factory(config=SMALL, root=d.root)
    view = await d2.view(token, sid)
    assert view["status"] == "idle"
    assert any(item.get("text") == "x" * 200_000 for item in view["items"])
    assert await d2.events(token, sid) == before
    assert (await d2.submit(token, sid, "next", "hello"))["duplicate"] is False
    await d2.wait_idle(token, sid)
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "big2", "content": "y" * 70_000})
    assert r.status_code == 413 and error_of(r) == "APPEND_REJECTED"  # new events are held to it


def _input_of(n: int) -> str:
    """The text of an input whose ``input.submitted`` event is exactly ``n`` bytes (as stored)."""
    def size(text: str) -> int:
        return len(Codec().pack(InputSubmitted(content=[TextPart(text)], when_busy="followUp")))
    # (MessagePack's string header grows past 65,535 bytes: one of the two overheads fits)
    texts = ["x" * (n - (size("x" * k) - k)) for k in (300, 70_000)]
    return next(text for text in texts if size(text) == n)


async def test_a_repeat_of_an_input_recorded_before_the_maximum_was_lowered_is_a_duplicate(daemon_factory) -> None:
    # The size was checked before the store looked up the request id: a client retrying an input
    # recorded under a larger maximum (its answer lost to the restart) was told 413, and took the
    # input the session had run for refused. A repeat is answered as the first try was (F-LOG-4);
    # a new input is held to the new maximum all the same.
    d = await daemon_factory()
    token = await d.pair("c1", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    first = await d.submit(token, sid, "big", "x" * 200_000)
    await d.wait_idle(token, sid)
    await stop_daemon(d)

    d2 = await daemon_factory(config=SMALL, root=d.root)
    before = await d2.events(token, sid)
    for content in ["x" * 200_000, "y" * 900_000]:  # (what a repeat holds does not matter: F-LOG-4)
        r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "big", "content": content})
        assert r.status_code == 202, r.text
        assert r.json() == {"requestId": "big", "seq": first["seq"], "duplicate": True}
    assert await d2.events(token, sid) == before  # nothing written
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "new", "content": _input_of(64 * 1024 + 1)})
    assert r.status_code == 413 and error_of(r) == "APPEND_REJECTED", r.text  # one byte past: refused
    assert await d2.events(token, sid) == before
    assert (await d2.submit(token, sid, "new", _input_of(64 * 1024)))["duplicate"] is False  # at the maximum
    await d2.wait_idle(token, sid)
